"""Find, verify and unpack the upstream flash-attn sdist.

Order: explicit file (-C sdist) > directory of sdists (-C sdist-dir) > fa-shim's cache > download.
Every source is checked against the sha256 pinned in vendored_patches/<version>/release.toml.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import shutil
import tarfile
import zlib
from pathlib import Path

from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import Version

from ...core import _failures, _log
from ...core._errors import FaShimError
from ...settings._settings import Settings
from ...sources import _index
from . import _releases


@dataclasses.dataclass(frozen=True)
class Sdist:
    path: Path
    version: str
    sha256: str
    pinned: bool
    origin: str


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _matches(path: Path, version: str) -> bool:
    try:
        name, found = parse_sdist_filename(path.name)
    except InvalidSdistFilename:
        return False
    return name == canonicalize_name("flash-attn") and found == Version(version)


def _in_dir(directory: Path, version: str) -> Path | None:
    if not directory.is_dir():
        return None
    found = sorted(p for p in directory.glob("*.tar.gz") if _matches(p, version))
    return found[0] if found else None


def locate(settings: Settings) -> Sdist:
    version = settings.flash_attn_version
    if not version:
        raise FaShimError(
            "no flash-attn version is configured.",
            fix="set flash-attn-version in [tool.fa-shim] or pass -C flash-attn-version=2.8.3.",
        )
    release = _releases.release(version)
    if not release.pinned and not settings.allow_unknown_version:
        raise FaShimError(
            f"flash-attn {version} is not a version fa-shim knows (no pinned sha256 or patches).",
            fix=f"use one of {', '.join(_releases.known())}, or opt in with "
            "-C allow-unknown-version=true (built unverified and unpatched).",
        )
    cache = settings.resolved_cache_dir / "sdists"
    if settings.sdist:
        if not settings.sdist.is_file():
            raise FaShimError(
                f"the sdist {settings.sdist} (setting sdist) does not exist.",
                fix="pass the path of a flash_attn-<version>.tar.gz file.",
            )
        if not _matches(settings.sdist, version):
            raise FaShimError(
                f"{settings.sdist.name} is not the flash-attn {version} sdist.",
                fix="pass -C flash-attn-version=<its version> too, or the right file.",
            )
        path, origin = settings.sdist, "setting sdist"
    elif settings.sdist_dir and _in_dir(settings.sdist_dir, version):
        path, origin = _in_dir(settings.sdist_dir, version), f"sdist-dir {settings.sdist_dir}"
    elif _in_dir(cache, version):
        path, origin = _in_dir(cache, version), "fa-shim cache"
    elif settings.offline:
        where = f"{settings.sdist_dir} or " if settings.sdist_dir else ""
        raise FaShimError(
            f"the flash-attn {version} sdist is not in {where}{cache}, and offline is set.",
            fix="pass -C sdist=FILE or -C sdist-dir=DIR, or allow downloading.",
        )
    else:
        path = _index.download(version, cache, release.sha256)
        origin = "package index"
    assert path is not None
    digest = sha256_of(path)
    if not release.pinned:
        _log.warn(
            f"flash-attn {version} is not pinned by fa-shim: building the unverified "
            f"sdist {path} (sha256 {digest}) without vendored patches."
        )
    elif digest != release.sha256:
        raise FaShimError(
            f"sha256 mismatch for {path} (from {origin}): expected {release.sha256}, got {digest}. "
            "The file is truncated, corrupt or not the upstream release.",
            fix=(
                f"delete {path} and let fa-shim download it again."
                if origin == "fa-shim cache"
                else f"replace it with the original {release.sdist} from PyPI."
            ),
        )
    _log.info(
        f"using {path} (from {origin}, sha256 {digest[:12]}…"
        f"{' verified' if release.pinned else ' UNVERIFIED'})"
    )
    return Sdist(path, version, digest, release.pinned, origin)


def extract(sdist: Sdist, dest: Path) -> Path:
    """Unpack safely (no absolute paths, no links out of the tree); return the source root."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(sdist.path, "r:gz") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:  # pragma: no cover - Python without PEP 706
                for member in tar.getmembers():
                    if member.name.startswith(("/", "..")) or ".." in Path(member.name).parts:
                        raise tarfile.TarError(f"unsafe member {member.name}")
                tar.extractall(dest)
    except OSError as exc:  # the disk, not the archive: never blame a verified file
        shutil.rmtree(dest, ignore_errors=True)
        if exc.errno in _failures.NO_SPACE:
            raise _failures.no_space(dest, "extracting the sdist") from None
        if not isinstance(exc, gzip.BadGzipFile):
            raise
        raise _corrupt(sdist, exc) from None
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise _corrupt(sdist, exc) from None
    roots = [p for p in dest.iterdir() if (p / "setup.py").is_file()]
    if len(roots) != 1:
        raise FaShimError(
            f"{sdist.path} does not look like a flash-attn sdist (no single "
            "top-level directory with setup.py).",
            fix="use the upstream sdist.",
        )
    return roots[0]


def _corrupt(sdist: Sdist, exc: BaseException) -> FaShimError:
    if sdist.pinned:  # it matched its sha256 a moment ago: the file is not what is broken
        return FaShimError(
            f"{sdist.path} matches its pinned sha256 but did not unpack ({exc}).",
            fix="report this with the message; keep the file, it is the upstream release.",
        )
    return FaShimError(
        f"{sdist.path} is a corrupt or truncated archive ({exc}).",
        fix=f"delete {sdist.path} and download the sdist again.",
    )


def has_cuda_sources(sdist: Sdist) -> bool:
    """Whether the package compiles CUDA (decides if nvcc is needed), read from the archive."""
    try:
        with tarfile.open(sdist.path, "r:gz") as tar:
            return any(name.endswith(".cu") and "/csrc/" in name for name in tar.getnames())
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise FaShimError(
            f"{sdist.path} is a corrupt or truncated archive ({exc}).",
            fix=f"delete {sdist.path} and download the sdist again.",
        ) from None
