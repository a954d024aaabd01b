"""Find, verify and unpack the upstream flash-attn sdist.

Order: explicit file (-C sdist) > directory of sdists (-C sdist-dir) > fa-shim's cache > download.
Every source is checked against the sha256 pinned in vendored_patches/<version>/release.toml.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import re
import tarfile
from pathlib import Path

from packaging.version import Version

from .. import api
from ..api import (
    PROJECT,
    FaShimError,
    NotLocal,
    Settings,
    given_to_the_build,
    read_pyproject_table,
    sha256_of,
)
from . import _releases


@dataclasses.dataclass(frozen=True)
class Sdist:
    path: Path
    version: str
    sha256: str
    pinned: bool
    origin: str


def _in_dir(directory: Path, version: str) -> Path | None:
    if not directory.is_dir():
        return None
    found = sorted(p for p in directory.glob("*.tar.gz") if _releases.is_sdist(p.name, version))
    return found[0] if found else None


def of_the_given_sdist(settings: Settings) -> Settings:
    """A given sdist of a known release builds that release (its sha256 says which), unless
    flash-attn-version is given to the build too (then locate refuses a mismatch)."""
    path = settings.sdist
    if not path or given_to_the_build(settings, "flash-attn-version") or not path.is_file():
        return settings
    try:
        digest = sha256_of(path)
    except OSError:  # locate names it
        return settings
    found = [v for v in _releases.known() if _releases.release(v).sha256 == digest]
    if not found or found[0] == settings.flash_attn_version:
        return settings
    api.info(
        f"{path.name} is flash-attn {found[0]} (its sha256): building it, not the default "
        f"{settings.flash_attn_version} (-C flash-attn-version picks the release)"
    )
    return dataclasses.replace(settings, own={**settings.own, "flash-attn-version": found[0]})


def locate(settings: Settings) -> Sdist:
    version = settings.flash_attn_version
    if not version:
        default = read_pyproject_table(PROJECT).get("flash-attn-version", "")
        raise FaShimError(
            "no flash-attn version is configured: the project's pyproject.toml names none in "
            "[tool.fa-shim] (is it the fa-shim checkout?).",
            fix=f"run it in the fa-shim checkout ({PROJECT}, which builds {default}), or set "
            f"FA_SHIM_FLASH_ATTN_VERSION={default} (any command) or -C flash-attn-version="
            f"{default} (builds and prepare).",
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
        if settings.sdist.is_dir():
            raise FaShimError(
                f"the sdist {settings.sdist} (setting sdist) is a directory, not an sdist file.",
                fix="pass the flash_attn-<version>.tar.gz file itself with -C sdist=FILE, or "
                f"the directory holding it with -C sdist-dir={settings.sdist}.",
            )
        if not settings.sdist.is_file():
            raise FaShimError(
                f"the sdist {settings.sdist} (setting sdist) does not exist.",
                fix="pass the path of a flash_attn-<version>.tar.gz file.",
            )
        if not _releases.is_sdist(settings.sdist.name, version):
            raise FaShimError(
                f"{settings.sdist.name} is not the flash-attn {version} sdist.",
                fix="pass -C flash-attn-version=<its version> too, or the right file.",
            )
        path, origin = settings.sdist, "setting sdist"
    elif settings.sdist_dir and (path := _in_dir(settings.sdist_dir, version)):
        origin = f"sdist-dir {settings.sdist_dir}"
    elif path := _in_dir(cache, version):
        origin = "fa-shim cache"
    elif settings.offline:
        where = f"{settings.sdist_dir} or " if settings.sdist_dir else ""
        raise NotLocal(
            f"the flash-attn {version} sdist is not in {where}{cache}, and offline is set.",
            fix="pass -C sdist=FILE or -C sdist-dir=DIR, or allow downloading.",
        )
    else:
        path = api.download_sdist(version, cache, release.sha256)
        origin = "package index"
    assert path is not None
    try:
        digest = sha256_of(path)
    except OSError as exc:  # e.g. another user's file, 0600, in a shared sdist-dir
        raise _unreadable(path, origin, exc) from None
    if not release.pinned:
        api.warn(
            f"flash-attn {version} is not pinned by fa-shim: building the unverified "
            f"sdist {path} (sha256 {digest}) without vendored patches."
        )
    elif digest != release.sha256:
        pin = _releases.VENDORED / version / _releases.RELEASE_FILE
        differ = sum(a != b for a, b in zip(digest, release.sha256, strict=True))
        if differ <= 3:  # a damaged file differs in ~60 of 64 digits; a mistyped pin in a few
            raise FaShimError(
                f"the sha256 pinned in {pin} (fa-shim's registry) differs from {path}'s (from "
                f"{origin}) in {differ} of 64 digits: {release.sha256} against {digest}. A "
                "damaged file differs in nearly every digit: the pin is mistyped.",
                fix=f"correct sha256 in {pin} to the one PyPI lists for {release.sdist} "
                "(https://pypi.org/project/flash-attn/#files); the sdist is fine.",
            )
        raise FaShimError(
            f"sha256 mismatch for {path} (from {origin}): {pin} pins {release.sha256}, the file "
            f"has {digest}. The file is truncated, corrupt or not the upstream release.",
            fix=(
                f"delete {path} and let fa-shim download it again"
                + (" (-C offline=false: offline forbids it)." if settings.offline else ".")
                if origin == "fa-shim cache"
                else f"put the original {release.sdist} from PyPI in its place (move {path} "
                "aside first), or name another copy with -C sdist=FILE."
            ),
        )
    api.info(
        f"using {path} (from {origin}, sha256 {digest[:12]}…"
        f"{' verified' if release.pinned else ' UNVERIFIED'})"
    )
    return Sdist(path, version, digest, release.pinned, origin)


def check_version(sdist: Sdist, pkg_info: str) -> None:
    """The sdist's own PKG-INFO Version is the release it is built as (an unpinned file is
    known by its name only: flash_attn-0.2.0.tar.gz holding 0.1.0 would be labelled 0.2.0)."""
    said = re.search(r"^Version:[ \t]*(\S+)", pkg_info.partition("\n\n")[0], re.MULTILINE)
    if said and Version(said.group(1)) == Version(sdist.version):
        return
    own = said.group(1) if said else None
    raise FaShimError(
        f"{sdist.path} (from {sdist.origin}) is built as flash-attn {sdist.version}, but its "
        f"PKG-INFO {f'says {own}' if own else 'has no Version field'}: the wheel would carry a "
        "version its sources are not.",
        fix=(
            f"build it as {own} (named flash_attn-{own}.tar.gz, -C flash-attn-version={own}), or "
            if own
            else ""
        )
        + f"give fa-shim the real flash-attn {sdist.version} sdist.",
    )


def _not_built(parts: tuple[str, ...]) -> bool:
    """What no CUDA build of any release reads, two thirds of a recent sdist's 9,800 files:
    ROCm's csrc/composable_kernel and CUTLASS beside its headers (tests, examples, tools, its
    Python package). setup.py includes csrc/cutlass/include alone; leaving the rest in the
    archive saves seconds of every lay-out and 60 MB of scratch."""
    inside = parts[1:]  # below the sdist's one top directory
    if inside[:2] == ("csrc", "composable_kernel"):
        return True
    return inside[:2] == ("csrc", "cutlass") and len(inside) > 3 and inside[2] != "include"


def extract(sdist: Sdist, dest: Path) -> Path:
    """Unpack safely into dest, which this makes (a failure removes it); the source root."""
    try:
        room = functools.partial(api.before_extract, dest)
        api.extract_archive(sdist.path, dest, "extracting the sdist", _not_built, room)
    except api.UnsafeMember as exc:
        raise api.unsafe_error(sdist.path, exc, _replace_fix(sdist)) from None
    except api.BROKEN_ARCHIVE as exc:  # BadGzipFile is an OSError: the archive, not the disk
        raise _corrupt(sdist, exc) from None
    roots = [p for p in dest.iterdir() if (p / "setup.py").is_file()]
    if len(roots) != 1:
        raise FaShimError(
            f"{sdist.path} does not look like a flash-attn sdist (no single "
            "top-level directory with setup.py).",
            fix="use the upstream sdist.",
        )
    return roots[0]


def _unreadable(path: Path, origin: str, exc: OSError) -> FaShimError:
    if path.is_dir():  # named like the sdist, found by its name
        return FaShimError(
            f"{path} (from {origin}) is a directory named like the sdist, not the sdist file.",
            fix=f"rename or move that directory out of {path.parent}, or name the sdist file "
            "with -C sdist=FILE.",
        )
    return FaShimError(
        f"cannot read the sdist {path} (from {origin}): {exc.strerror or exc}.",
        fix="make it readable for this user (e.g. `chmod a+r` by its owner), or name another "
        "copy with -C sdist=FILE.",
    )


def _replace_fix(sdist: Sdist) -> str:
    """Never "delete it" for a file of the user's (sdist-dir, setting sdist): only fa-shim's own
    cached download is fa-shim's to replace."""
    if sdist.origin == "fa-shim cache":
        return f"delete {sdist.path} (fa-shim's cached download) and build again."
    return f"replace {sdist.path} ({sdist.origin}) with an intact copy of the upstream sdist."


def _corrupt(sdist: Sdist, exc: BaseException) -> FaShimError:
    if sdist.pinned:  # it matched its sha256 a moment ago: the file is not what is broken
        return FaShimError(
            f"{sdist.path} matches its pinned sha256 but did not unpack ({exc}).",
            fix="report this with the message; keep the file, it is the upstream release.",
        )
    return FaShimError(
        f"{sdist.path} is a corrupt or truncated archive ({exc}).", fix=_replace_fix(sdist)
    )


def has_cuda_sources(sdist: Sdist, memo: Path | None = None) -> bool:
    """Whether the package compiles CUDA (needs nvcc), remembered under its sha256 in `memo`:
    asked on every build, where listing 2.8.3's 7,533 members costs about a second."""
    known = memo / f"{sdist.sha256}.json" if memo and sdist.sha256 else None
    if known:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return bool(json.loads(known.read_text())["cuda_sources"])
    found = _scan(sdist)
    if known:
        with contextlib.suppress(OSError):  # an unwritable cache only costs the next scan
            api.atomic_write(known, json.dumps({"cuda_sources": found}).encode())
    return found


def _scan(sdist: Sdist) -> bool:
    try:
        with tarfile.open(sdist.path, "r:gz") as tar:
            members = api.checked_members(tar, sdist.path)
            return any(m.name.endswith(".cu") and "/csrc/" in m.name for m, _ in members)
    except api.UnsafeMember as exc:
        raise api.unsafe_error(sdist.path, exc, _replace_fix(sdist)) from None
    except api.BROKEN_ARCHIVE as exc:  # BadGzipFile is an OSError: the archive, not the disk
        raise _corrupt(sdist, exc) from None
    except OSError as exc:
        raise _unreadable(sdist.path, sdist.origin, exc) from None
