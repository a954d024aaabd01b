"""A CUDA 12.4 toolkit home for the e2e tests, assembled without a system install.

The index has no CUDA 12 nvcc (fa_backend/toolchain/_toolkit.py), so the compiler comes from
Debian trixie's non-free `nvidia-cuda-toolkit` 12.4.131 (nvcc, cicc, cudafe++, ptxas, fatbinary,
nvlink, the crt link stubs, libdevice), fetched with `apt-get download` through a private sources
list and state (the system's apt configuration is read, never changed) and unpacked with
`dpkg -x`. cicc and the other tools link nothing but libc and libstdc++ (`ldd`), so libnvvm4
is not needed. The headers and libcudart come from the index's cu12 wheels of the same release:
nvidia-cuda-runtime-cu12 (cuda_runtime.h & co., libcudart.so.12), nvidia-cuda-nvcc-cu12
(include/crt, which nvcc includes into every unit; Debian ships it only in the 934 MB
nvidia-cuda-dev) and nvidia-cuda-cccl-cu12 (CUB, Thrust, libcu++ with cuda/std/*).

The layout is a CUDA_HOME as NVIDIA's installer makes it (bin/, nvvm/bin/cicc,
nvvm/libdevice/, include/, lib64/) with its own nvcc.profile, relative to the profile's
directory ($(_HERE_)): Debian's names /usr/lib/nvidia-cuda-toolkit, and an absolute path would
name the temporary directory the home is assembled in.

Downloaded once per machine: the home lives under the user's cache (XDG_CACHE_HOME at import,
before the suite's per-test cache redirection), assembled in a temporary directory beside it
under a lock and renamed into place once its nvcc reports 12.4, so a killed run leaves no half
toolkit (its leftover is removed by the next run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

CUDA = "12.4"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fa-shim-test-cuda12"
HOME = CACHE / CUDA
MANIFEST = "fa-shim-test-toolkit.txt"  # written last: a home without it is not one
SOURCES = (
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
    "http://deb.debian.org/debian trixie main contrib non-free\n"
)
DEB = "nvidia-cuda-toolkit"
WHEELS = ("nvidia-cuda-runtime-cu12", "nvidia-cuda-nvcc-cu12", "nvidia-cuda-cccl-cu12")
# what the .deb puts where, and where a CUDA_HOME has it
FROM_DEB = {
    "usr/lib/nvidia-cuda-toolkit/bin/nvcc": "bin/nvcc",
    "usr/lib/nvidia-cuda-toolkit/bin/crt": "bin/crt",
    "usr/lib/nvidia-cuda-toolkit/bin/cicc": "nvvm/bin/cicc",
    "usr/lib/nvidia-cuda-toolkit/libdevice": "nvvm/libdevice",
    **{f"usr/bin/{tool}": f"bin/{tool}" for tool in ("cudafe++", "ptxas", "fatbinary", "nvlink")},
    "usr/bin/bin2c": "bin/bin2c",
}
# NVIDIA's own profile (a toolkit's bin/nvcc.profile), for this layout
PROFILE = """\
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
"""


class Unreachable(Exception):
    """apt-get or the package index cannot be used here (the tests that need the home skip)."""


def _run(cmd: list, what: str, **kwargs) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    except OSError as exc:
        raise Unreachable(f"{what}: {cmd[0]}: {exc}") from None
    if proc.returncode != 0:
        raise Unreachable(f"{what} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc


def _apt_download(work: Path) -> Path:
    """The .deb of DEB from Debian trixie, through apt state of its own under work."""
    (work / "lists" / "partial").mkdir(parents=True)
    (work / "cache" / "archives" / "partial").mkdir(parents=True)
    (work / "sources.list").write_text(SOURCES)
    options = [
        f"-oDir::Etc::SourceList={work / 'sources.list'}",
        "-oDir::Etc::SourceParts=/dev/null",
        "-oDir::Etc::Preferences=/dev/null",
        "-oDir::Etc::PreferencesParts=/dev/null",
        f"-oDir::State::Lists={work / 'lists'}",
        "-oDir::State::status=/dev/null",
        f"-oDir::Cache={work / 'cache'}",
        # as root, apt downloads as _apt, who cannot write into our private directories
        *(["-oAPT::Sandbox::User=root"] if os.geteuid() == 0 else []),
    ]
    update = _run(["apt-get", *options, "update"], "apt-get update (Debian trixie)")
    if not any((work / "lists").glob("*_Packages*")):  # apt-get update warns, exits 0
        raise Unreachable(f"apt-get update fetched no package list: {update.stderr.strip()}")
    debs = work / "debs"
    debs.mkdir()
    _run(["apt-get", *options, "download", DEB], f"apt-get download {DEB}", cwd=debs)
    (deb,) = debs.glob("*.deb")
    return deb


def _pip_download(work: Path) -> list[Path]:
    wheels = work / "wheels"
    pins = [f"{name}=={CUDA}.*" for name in WHEELS]
    _run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", wheels, *pins],
        "pip download of the CUDA 12.4 header wheels",
    )
    return sorted(wheels.glob("*.whl"))


def _unpack_wheel(wheel: Path, home: Path) -> None:
    """nvidia/<part>/include/** into include/, libcudart.so.12 into lib64/."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            parts = info.filename.split("/")
            if info.is_dir() or parts[0] != "nvidia" or len(parts) < 4:
                continue
            if parts[2] == "include" and parts[-1] != "__init__.py":
                target = home.joinpath("include", *parts[3:])
            elif parts[2:] == ["lib", "libcudart.so.12"]:
                target = home / "lib64" / "libcudart.so.12"
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)


def _nvcc_release(home: Path) -> str:
    """The assembled nvcc's release line. An nvcc that does not run is a broken toolkit, not an
    unreachable one: it fails the tests that need it, never skips them."""
    nvcc = home / "bin" / "nvcc"
    try:
        proc = subprocess.run([nvcc, "--version"], capture_output=True, text=True)
    except OSError as exc:
        raise AssertionError(f"the assembled {nvcc} does not run: {exc}") from None
    if proc.returncode != 0:
        raise AssertionError(
            f"the assembled {nvcc} --version exited {proc.returncode}: "
            + proc.stderr.strip()[-2000:]
        )
    out = proc.stdout
    return next((line for line in out.splitlines() if "release" in line), out.strip())


def _assemble(tmp: Path, work: Path) -> str:
    deb = _apt_download(work)
    wheels = _pip_download(work)
    unpacked = work / "deb"
    _run(["dpkg", "-x", deb, unpacked], f"dpkg -x {deb.name}")
    for source, target in FROM_DEB.items():
        (tmp / target).parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (unpacked / source).is_dir() else shutil.copy2
        copy(unpacked / source, tmp / target)
    (tmp / "bin" / "nvcc.profile").write_text(PROFILE)
    for wheel in wheels:
        _unpack_wheel(wheel, tmp)
    (tmp / "lib64" / "libcudart.so").symlink_to("libcudart.so.12")  # torch links -lcudart
    release = _nvcc_release(tmp)
    if f"release {CUDA}," not in release:
        raise AssertionError(f"{deb.name} brought an nvcc of another CUDA: {release}")
    return "\n".join([release, deb.name, *(w.name for w in wheels)])


def home() -> tuple[Path, dict]:
    """The toolkit home (assembled now unless a complete one is cached) and how it came:
    {"assembled": bool, "seconds": float}. Raises Unreachable without apt-get or the index."""
    started = time.monotonic()
    if (HOME / MANIFEST).is_file():
        return HOME, {"assembled": False, "seconds": time.monotonic() - started}
    if not shutil.which("apt-get") or not shutil.which("dpkg"):
        raise Unreachable("apt-get and dpkg are needed to fetch Debian's nvidia-cuda-toolkit")
    from filelock import FileLock

    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / f".{CUDA}.lock")):
        if (HOME / MANIFEST).is_file():  # another run assembled it meanwhile
            return HOME, {"assembled": False, "seconds": time.monotonic() - started}
        for leftover in CACHE.glob(f".{CUDA}-*"):  # a killed run's (we hold the lock)
            shutil.rmtree(leftover, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{CUDA}-", dir=CACHE))
        try:
            with tempfile.TemporaryDirectory(prefix=f".{CUDA}-work-", dir=CACHE) as work:
                manifest = _assemble(tmp, Path(work))
            (tmp / MANIFEST).write_text(manifest + "\n")
            tmp.chmod(0o755)
            shutil.rmtree(HOME, ignore_errors=True)  # one without a manifest: not a home
            os.replace(tmp, HOME)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return HOME, {"assembled": True, "seconds": time.monotonic() - started}
