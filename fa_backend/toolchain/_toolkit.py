"""Which nvcc a build uses, the machine's or one provisioned from the package index
(docs/guides/cuda-toolkit.md).

Setting `cuda-toolkit`: `auto` provisions only when no system nvcc fits torch, `system` never,
`index` always. Provisioning installs NVIDIA's compiler wheels (COMPONENTS), each checked against
its index sha256, into <cache-dir>/toolkits/<major.minor>/, assembled under a lock and renamed
into place once its nvcc reports the right version. CUDA 12 has no nvcc on the index.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import shutil
import tempfile
import time
import urllib.parse
import zipfile
from pathlib import Path

from packaging import tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ..core import _atomic, _hostlock, _log
from ..core._errors import FaShimError
from . import _compilers
from ._torch import TorchInfo

MODES = ("auto", "system", "index")
COMPONENTS = (
    "nvidia-cuda-nvcc",
    "nvidia-nvvm",
    "nvidia-cuda-crt",
    "nvidia-cuda-runtime",
    "nvidia-cuda-cccl",
)
FIRST_MAJOR = 13  # the first CUDA whose compiler wheels carry bin/nvcc
MANIFEST = "fa-shim-toolkit.json"  # written last: a toolkit directory without it is not one
ORIGIN = "cuda-toolkit from the package index"
LOCK_HEARTBEAT = 15.0  # seconds, as the wheel cache's default (_hostlock)


def mode(setting: str) -> str:
    word = str(setting).strip().lower()
    if word not in MODES:
        raise FaShimError(
            f"setting cuda-toolkit is {setting!r}, expected one of {', '.join(MODES)}.",
            fix="pass -C cuda-toolkit=auto (the default), system or index.",
        )
    return word


def home(cache_dir: Path, cuda: str) -> Path:
    return cache_dir / "toolkits" / cuda


def _manifest(root: Path) -> dict | None:
    try:
        return json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def installed(cache_dir: Path, cuda: str) -> dict | None:
    """The manifest of a complete provisioned toolkit for that CUDA, or None."""
    root = home(cache_dir, cuda)
    return _manifest(root) if os.access(root / "bin" / "nvcc", os.X_OK) else None


def nvcc_of(cache_dir: Path, cuda: str) -> _compilers.Nvcc:
    nvcc = home(cache_dir, cuda) / "bin" / "nvcc"
    return _compilers.Nvcc(nvcc, _compilers.nvcc_version(nvcc), ORIGIN)


def _no_compiler_on_index(torch: TorchInfo, found: str) -> FaShimError:
    cuda = torch.cuda
    return FaShimError(
        f"torch {torch.version} is built with CUDA {cuda}, and {found}; "
        f"fa-shim cannot bring one: the package index has no CUDA {torch.cuda_major} compiler "
        f"(the nvidia-cuda-nvcc-cu{torch.cuda_major} wheels carry ptxas and headers but no "
        "bin/nvcc; fa-shim provisions nvcc for CUDA 13 and later torches only).",
        fix=f"install the CUDA toolkit {cuda}, or another {torch.cuda_major}.x (torch accepts a "
        f"minor mismatch within its CUDA major, with a warning): "
        f"NVIDIA's installer or your distribution's package (e.g. `cuda-toolkit-"
        f"{cuda.replace('.', '-')}` from NVIDIA's apt/dnf repository), `conda install -c "
        f"nvidia cuda-toolkit={cuda}`, or a CUDA {cuda} devel container image; then set "
        f"CUDA_HOME=/usr/local/cuda-{cuda} or pass -C nvcc=/path/to/nvcc. Or install a torch "
        f"built for CUDA {FIRST_MAJOR} or later.",
    )


@dataclasses.dataclass(frozen=True)
class Decision:
    """A system nvcc, or the CUDA release to provision (or reuse); `error` when neither works."""

    nvcc: _compilers.Nvcc | None = None
    provision: str | None = None  # the CUDA major.minor to provision (or reuse)
    error: FaShimError | None = None


def decide(torch: TorchInfo, settings) -> Decision:
    """The choice, made without downloading anything (doctor asks this too)."""
    how = mode(settings.cuda_toolkit)
    # an nvcc the user named (setting nvcc, CUDA_HOME, CUDA_PATH): auto never replaces it
    named = settings.nvcc or os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    # a CPU torch: choose_nvcc's error
    if not torch.cuda or how == "system" or (how == "auto" and named):
        try:
            return Decision(nvcc=_compilers.choose_nvcc(torch, settings.nvcc))
        except FaShimError as exc:
            return Decision(error=exc)
    if how == "auto" and any(
        n.version and n.version.major == torch.cuda_major for n in _compilers.find_nvccs()
    ):
        return Decision(nvcc=_compilers.choose_nvcc(torch, None))
    if torch.cuda_major < FIRST_MAJOR:
        found = (
            "-C cuda-toolkit=index asks for one from the package index"
            if how == "index"
            else "no nvcc on this machine has its major"
        )
        return Decision(error=_no_compiler_on_index(torch, found))
    version = Version(torch.cuda)  # a provisioned toolkit has torch's CUDA major.minor
    return Decision(provision=f"{version.major}.{version.minor}")


def would_download(torch: TorchInfo, settings) -> bool:
    """Whether choose() would fetch a toolkit from the index now (prepare_metadata never does)."""
    cuda = decide(torch, settings).provision
    return bool(cuda) and installed(settings.resolved_cache_dir, cuda) is None


def choose(torch: TorchInfo, settings) -> _compilers.Nvcc:
    """The nvcc of this build, provisioning a toolkit when the decision says so."""
    decision = decide(torch, settings)
    if decision.error is not None:
        raise decision.error
    nvcc = decision.nvcc
    if nvcc is None:
        cuda = decision.provision
        if mode(settings.cuda_toolkit) == "auto":
            _log.info(f"no nvcc on this machine fits torch {torch.version} (CUDA {torch.cuda})")
        provision(settings.resolved_cache_dir, cuda, settings.offline)
        nvcc = nvcc_of(settings.resolved_cache_dir, cuda)
    _log.info(_compilers.fit(nvcc, torch))  # which nvcc, its CUDA against torch's, and why
    return nvcc


@dataclasses.dataclass(frozen=True)
class Wheel:
    project: str
    version: Version
    url: str
    sha256: str | None

    @property
    def filename(self) -> str:
        return urllib.parse.unquote(self.url.rsplit("/", 1)[-1])


def provision(cache_dir: Path, cuda: str, offline: bool = False) -> Path:
    """<cache_dir>/toolkits/<cuda>, provisioned now unless a complete one is there."""
    root = home(cache_dir, cuda)
    if installed(cache_dir, cuda):
        _log.info(f"using the CUDA {cuda} toolkit provisioned before at {root}")
        return root
    if offline:
        raise FaShimError(
            f"no CUDA {cuda} compiler here, and setting offline forbids provisioning one from "
            "the package index.",
            fix="run once without -C offline (the toolkit is kept for later builds), or "
            f"install the CUDA toolkit {cuda} and pass -C cuda-toolkit=system.",
        )
    path = root.parent / f".{cuda}.lock"
    lock = _hostlock.HostLock(
        path,
        math.inf,  # while its holder lives (a dead one's is taken over)
        LOCK_HEARTBEAT,
        lambda holder: _log.info(f"another build is provisioning CUDA {cuda} ({path}); waiting"),
        what="CUDA toolkit",
        held_by=f"another build provisioning CUDA {cuda}",
        fix="wait for that build or stop it.",
    )
    with lock.held():
        if installed(cache_dir, cuda):  # the other build finished it
            return root
        for leftover in root.parent.glob(f".{cuda}-*.part"):  # a killed run's (we hold the lock)
            shutil.rmtree(leftover, ignore_errors=True)
        _assemble(root, cuda)
    return root


def find_wheels(cuda: str) -> tuple[list[Wheel], dict, dict]:
    """The highest CUDA <cuda>.* wheel of each component this interpreter can install."""
    from ..sources import _index  # the network's modules: not a build whose nvcc is here

    config = _index.pip_config()
    urls, auth = _index.indexes(config)
    want = Version(cuda).release[:2]
    supported = set(tags.sys_tags())
    chosen: list[Wheel] = []
    failures: list[str] = []
    for project in COMPONENTS:
        best: Wheel | None = None
        for index in urls:
            try:
                files = _index.project_files(index, project, config, auth)
            except _index.FETCH_ERRORS as exc:
                failures.append(f"{_index.redact(index)}: {getattr(exc, 'reason', exc)}")
                continue
            for url, sha in files:
                filename = urllib.parse.unquote(url.rsplit("/", 1)[-1])
                try:
                    name, version, _, wheel_tags = parse_wheel_filename(filename)
                except InvalidWheelFilename:
                    continue
                if (
                    name == canonicalize_name(project)
                    and version.release[:2] == want
                    and not version.is_prerelease
                    and wheel_tags & supported
                    and (best is None or version > best.version)
                ):
                    best = Wheel(project, version, url, sha)
        if best is None:
            raise FaShimError(
                f"the package index has no {project} {cuda}.* wheel for this machine, so "
                f"fa-shim cannot provision a CUDA {cuda} compiler.",
                details="indexes asked: "
                + (", ".join(_index.redact(u) for u in urls) or "none (pip no-index)")
                + ("\n" + "\n".join(failures) if failures else ""),
                fix=f"point pip's index-url at an index that mirrors NVIDIA's CUDA {cuda} "
                f"wheels (PyPI does), or install the CUDA toolkit {cuda} and pass "
                "-C cuda-toolkit=system.",
            )
        if not best.sha256:
            raise FaShimError(
                f"the index lists {best.filename} without a sha256, so fa-shim cannot check "
                "what it would download.",
                fix="use an index that publishes hashes (PEP 503 #sha256= or PEP 691), or "
                f"install the CUDA toolkit {cuda} and pass -C cuda-toolkit=system.",
            )
        chosen.append(best)
    return chosen, config, auth


def _extract(data: bytes, dest: Path) -> int:
    """The wheel's nvidia/<tree>/ files into dest, modes from the wheel less the umask."""
    count = 0
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for info in zf.infolist():
            parts = info.filename.split("/")
            rel = parts[2:]
            # not .dist-info, the namespace __init__.py, nor NVIDIA's build records (in every wheel)
            if info.is_dir() or len(parts) < 3 or parts[0] != "nvidia" or rel[0] == ".metadata":
                continue
            if any(p in ("", ".", "..") for p in rel):
                raise FaShimError(
                    f"the wheel holds an unsafe path {info.filename!r}.",
                    fix="check the package index: this is not an NVIDIA wheel.",
                )
            target = dest.joinpath(*rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            mode = 0o777 if (info.external_attr >> 16) & 0o111 else 0o666
            target.unlink(missing_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)  # umask applies
            with os.fdopen(fd, "wb") as out, zf.open(info) as src:
                shutil.copyfileobj(src, out)
            count += 1
    return count


def _assemble(root: Path, cuda: str) -> None:
    from ..sources import _index

    started = time.monotonic()
    wheels, config, auth = find_wheels(cuda)
    _log.info(
        f"provisioning a CUDA {cuda} compiler from the package index into {root}: "
        + ", ".join(f"{w.project} {w.version}" for w in wheels)
    )
    tmp = Path(tempfile.mkdtemp(prefix=f".{cuda}-", suffix=".part", dir=root.parent))
    try:
        tmp.chmod(0o777 & ~_atomic.umask())  # mkdtemp makes it private; the toolkit is shared
        records = []
        for wheel in wheels:
            try:
                data = _index.fetch(wheel.url, config, auth)
            except _index.FETCH_ERRORS as exc:
                raise FaShimError(
                    f"downloading {_index.redact(wheel.url)} failed: "
                    f"{getattr(exc, 'reason', exc)}.",
                    fix="check the network and pip's index/proxy/cert settings, or install "
                    f"the CUDA toolkit {cuda} and pass -C cuda-toolkit=system.",
                ) from None
            digest = hashlib.sha256(data).hexdigest()
            if digest != wheel.sha256:
                raise FaShimError(
                    f"{_index.redact(wheel.url)} has sha256 {digest}, the index lists "
                    f"{wheel.sha256}: the download is corrupt or was tampered with; nothing "
                    "was installed.",
                    fix="run the build again; if it persists, check the index or proxy.",
                )
            files = _extract(data, tmp)
            records.append(
                {
                    "project": wheel.project,
                    "version": str(wheel.version),
                    "file": wheel.filename,
                    "sha256": digest,
                    "bytes": len(data),
                    "files": files,
                }
            )
        _finish_layout(tmp, cuda)
        nvcc = tmp / "bin" / "nvcc"
        found = _compilers.nvcc_version(nvcc)
        if found is None or f"{found.major}.{found.minor}" != cuda:
            raise FaShimError(
                f"the provisioned nvcc reports CUDA {found or 'nothing'} (expected {cuda}).",
                fix="report this; meanwhile install the CUDA toolkit and pass "
                "-C cuda-toolkit=system.",
            )
        manifest = {
            "cuda": cuda,
            "nvcc": _compilers.nvcc_build(nvcc),
            "wheels": records,
            "provisioned": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        if root.exists():  # without a manifest: what a killed run or a manual edit left
            shutil.rmtree(root)
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _log.info(f"provisioned CUDA {cuda} ({manifest['nvcc']}) in {time.monotonic() - started:.0f} s")


def _finish_layout(tree: Path, cuda: str) -> None:
    """What torch's cpp_extension and the linker look for, beyond the wheels' own layout."""
    lib = tree / "lib"
    if lib.is_dir() and not (tree / "lib64").exists():
        (tree / "lib64").symlink_to("lib")  # cpp_extension links -L$CUDA_HOME/lib64
    major = Version(cuda).major
    if (lib / f"libcudart.so.{major}").exists() and not (lib / "libcudart.so").exists():
        (lib / "libcudart.so").symlink_to(f"libcudart.so.{major}")  # for -lcudart


def manifest_of(nvcc: _compilers.Nvcc) -> dict | None:
    """For the provenance: the wheels a provisioned nvcc came from (None for a system one)."""
    return _manifest(nvcc.path.parent.parent) if nvcc.origin == ORIGIN else None
