"""What torch will the build compile against? Asked in a child interpreter, answered as JSON: the
backend never imports torch (pip's build isolation hides it, and a probe keeps the hooks fast).

Where the torch comes from, in order: the `torch-python` setting's interpreter; the one running
the build; the same with `-E`, past pip's isolation overlay (PYTHONPATH), which sees the
environment the wheel goes into. A frontend's separate build venv hides it: the build stops and
says how to proceed (docs/guides/frontends.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from packaging.version import Version

from ..core import _atomic, _log
from ..core._errors import FaShimError

_PROBE = r"""
import json, os, sys, sysconfig
stdlib = {os.path.normpath(sysconfig.get_path(k)) for k in ("stdlib", "platstdlib")}
info = {
    "python": sys.executable,
    "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
    "python_version": "%d.%d" % sys.version_info[:2],
    "search_path": [
        p for p in sys.path[1:]
        if p and os.path.isdir(p) and os.path.normpath(p) not in stdlib
        and os.path.basename(p) != "lib-dynload"
    ],
}
if sys.argv[1:] == ["locate"]:  # where torch is, without importing it (milliseconds)
    try:
        import importlib.util
        spec = importlib.util.find_spec("torch")
        info["torch_init"] = spec.origin if spec else None
    except Exception:
        info["torch_init"] = None
else:
    try:
        import inspect, re
        import torch
        from torch.utils import cpp_extension
    except Exception as exc:
        info["error"] = "%s: %s" % (type(exc).__name__, exc)
    else:
        src = inspect.getsource(cpp_extension.BuildExtension.build_extensions)
        std = re.search(r"cpp_flag_prefix \+ '(c\+\+\d+)'", src)
        try:  # what torch was compiled for, known without a GPU (unlike get_arch_list)
            arch_list = torch._C._cuda_getArchFlags().split()
        except Exception:
            arch_list = []
        info.update({
            "version": torch.__version__,
            "cuda": torch.version.cuda,
            "abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
            "cuda_home": cpp_extension.CUDA_HOME,
            "package_dir": os.path.dirname(torch.__file__),
            "cxx_std": std.group(1) if std else "c++17",
            "arch_list": arch_list,
            # the -DPy_LIMITED_API torch adds to a py_limited_api extension (None: it adds none)
            "limited_api": getattr(cpp_extension, "min_supported_cpython", None),
        })
print(json.dumps(info))
"""

_INTERPRETER_KEYS = ("ext_suffix", "python_version", "torch_init")  # what no TorchInfo field keeps
# cpp_extension.CUDA_HOME, part of the answer, is found through these and the nvcc on PATH
_ENV_KEYS = ("CUDA_HOME", "CUDA_PATH")


@dataclasses.dataclass(frozen=True)
class TorchInfo:
    version: str
    cuda: str | None
    abi: int
    cuda_home: str | None
    package_dir: str
    cxx_std: str
    python: str
    found_by: str = "the build environment"  # how it was found, for the log and errors
    # the target interpreter's import path beyond the standard library, in its order: what the
    # upstream build needs to import torch when it runs in a frontend's build environment
    search_path: tuple[str, ...] = ()
    # what this torch was compiled for (`sm_90`...): the arch fallback on a machine without a GPU
    arch_list: tuple[str, ...] = ()
    # torch's cpp_extension's -DPy_LIMITED_API for a py_limited_api extension (0x030A0000 since
    # torch 2.10): added after the extension's own, so it is the one the module is compiled with
    limited_api: str | None = None

    @property
    def site_dir(self) -> str:
        return str(Path(self.package_dir).parent)

    @property
    def extra_sys_path(self) -> list[str]:
        """Directories the upstream build appends to sys.path to import this torch."""
        paths = list(dict.fromkeys(self.search_path))
        return paths if self.site_dir in paths else [self.site_dir, *paths]

    @property
    def lib_dir(self) -> Path:
        return Path(self.package_dir) / "lib"

    @property
    def cuda_major(self) -> int | None:
        return Version(self.cuda).major if self.cuda else None

    @property
    def label(self) -> str:
        """Upstream's naming: cu130torch2.11cxx11abiTRUE (CUDA major+minor, torch major.minor)."""
        torch_v, cuda = Version(self.version), Version(self.cuda or "0")
        cuda_part = f"cu{cuda.major}{cuda.minor}" if self.cuda else "cpu"
        abi = str(bool(self.abi)).upper()
        return f"{cuda_part}torch{torch_v.major}.{torch_v.minor}cxx11abi{abi}"


_early: dict[tuple, subprocess.Popen] = {}  # by what its answer depends on (_started_as)


def _started_as(python: str) -> tuple:
    return python, os.getcwd(), tuple(sorted(os.environ.items()))


def _start(python: str, flags: list[str], *args: str) -> subprocess.Popen:
    argv = [python, *flags, "-c", _PROBE, *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def locate_early() -> None:
    """Start the running interpreter's locate child now: a hook's imports take longer than it
    does, so it has answered by the time the plan asks (twice per pip install)."""
    key = _started_as(sys.executable)
    for other in [k for k in _early if k != key]:  # an earlier hook's, in another environment
        stale = _early.pop(other)
        stale.kill()
        stale.communicate()
    if key not in _early:
        with contextlib.suppress(OSError):  # the plan's own call then says why
            _early[key] = _start(sys.executable, [], "locate")


def _run_probe(python: str, flags: list[str], *args: str) -> dict:
    """The probe's answer; {"error": ...} when torch is not importable or the probe failed."""
    early = _early.pop(_started_as(python), None) if args == ("locate",) and not flags else None
    try:
        proc = early or _start(python, flags, *args)
    except OSError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.communicate()
        return {"error": f"{type(exc).__name__}: {exc}"}
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        err = err.strip().splitlines()
        return {"error": err[-1] if err else f"exit status {proc.returncode}, no output"}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"error": f"unexpected output: {lines[-1][:200]}"}


def _cached_probe(python: str, flags: list[str], cache_dir: Path | None) -> dict:
    """The probe's answer, importing torch (seconds, twice per pip install) only when this torch
    was not probed before: its facts are kept under a key of the interpreter, the torch files'
    identity and the environment; the interpreter's own facts are always asked afresh."""
    where = _run_probe(python, flags, "locate") if cache_dir else {}
    init = where.get("torch_init")
    try:
        stamp = [
            (st.st_ino, st.st_size, st.st_mtime_ns)
            for st in (os.stat(init), os.stat(Path(init).with_name("version.py")))
        ]
    except (OSError, TypeError):
        return _run_probe(python, flags)  # no torch to be found: the full probe says why
    env = {k: os.environ.get(k) for k in _ENV_KEYS}
    # not PATH itself: pip's isolated builds put a fresh directory on it every time
    env["nvcc"] = shutil.which("nvcc")
    key_facts = [_PROBE, python, flags, init, stamp, env]
    key = hashlib.sha256(json.dumps(key_facts).encode()).hexdigest()[:32]
    entry = cache_dir / f"{key}.json"
    with contextlib.suppress(OSError, ValueError):
        return {**json.loads(entry.read_text(encoding="utf-8")), **where}
    answer = _run_probe(python, flags)
    if "error" not in answer:
        with contextlib.suppress(OSError):  # an unwritable cache only costs the next probe
            _atomic.write(entry, json.dumps(answer).encode())
    return answer


def _probe_with_fallback(python: str, cache_dir: Path | None) -> tuple[dict, bool]:
    """(answer, isolated): as the interpreter sees itself, then past a PYTHONPATH overlay."""
    answer = _cached_probe(python, [], cache_dir)
    if "error" not in answer or not os.environ.get("PYTHONPATH"):
        return answer, False
    past = _cached_probe(python, ["-E"], cache_dir)
    return (past, True) if "error" not in past else (answer, False)


def _info(answer: dict, found_by: str) -> TorchInfo:
    fields = {k: v for k, v in answer.items() if k not in _INTERPRETER_KEYS}
    fields["search_path"] = tuple(fields.get("search_path") or ())
    fields["arch_list"] = tuple(fields.get("arch_list") or ())
    return TorchInfo(found_by=found_by, **fields)


_WAYS_OUT = (
    "make the build see that torch, in one of three ways:\n"
    "  1. build without isolation, with torch and fa-shim's build tools installed there: "
    "`pip install --no-build-isolation ...`, `uv pip install --no-build-isolation ...`, "
    "`python -m build --no-isolation`;\n"
    '  2. uv projects: `no-build-isolation-package = ["flash-attn"]` in [tool.uv], or '
    "`[tool.uv.extra-build-dependencies] flash-attn = "
    '[{ requirement = "torch", match-runtime = true }]` (both with a '
    "`[[tool.uv.dependency-metadata]]` entry for flash-attn, whose metadata is dynamic);\n"
    "  3. name the interpreter whose torch to build against: "
    "`-C torch-python=/path/to/venv/bin/python` or FA_SHIM_TORCH_PYTHON (the same Python "
    "version as the one running the build)."
)


def _not_found(error: str) -> FaShimError:
    python = sys.executable
    if os.environ.get("PYTHONPATH"):
        # pip's isolation: -E looked at the target environment itself and found no torch there.
        return FaShimError(
            f"torch is not installed in the environment of {python} ({error}); fa-shim builds "
            "flash-attn against the torch that is already installed where it will run, and "
            "never installs one.",
            fix="install the torch you will run with first, in a separate step "
            "(e.g. `pip install torch==2.11.0`; pip builds flash-attn before it installs the "
            "torch your requirements name), then install flash-attn again. If this build runs "
            "in another environment than the one flash-attn goes into, " + _WAYS_OUT,
        )
    prefix = Path(sys.prefix)  # a frontend's throwaway build environment, when recognisable
    uv = any(part.startswith("builds-v") for part in prefix.parts)
    frontend = "uv" if uv else "python -m build" if prefix.name.startswith("build-env-") else None
    where = (
        f" This is a temporary build environment of {frontend}, which builds in a virtual "
        "environment of its own: the environment flash-attn is installed into, and its torch, "
        "cannot be seen from here."
        if frontend
        else ""
    )
    return FaShimError(
        f"torch is not importable by {python} ({error}).{where}",
        fix="install the torch you will run with into the environment flash-attn goes into "
        "(e.g. `pip install torch==2.11.0`), then " + _WAYS_OUT,
    )


def _probe_named(python: Path, cache_dir: Path | None) -> TorchInfo:
    """The torch of the interpreter named by the torch-python setting."""
    if not (python.is_file() and os.access(python, os.X_OK)):
        raise FaShimError(
            f"the interpreter named by setting torch-python ({python}) does not exist or is not "
            "executable.",
            fix="point torch-python at the python of the environment that has your torch, "
            "e.g. -C torch-python=/path/to/venv/bin/python.",
        )
    answer, _ = _probe_with_fallback(str(python), cache_dir)
    version = "{}.{}".format(*sys.version_info[:2])  # the interpreter running the build
    suffix = str(sysconfig.get_config_var("EXT_SUFFIX"))
    if answer.get("ext_suffix") and answer["ext_suffix"] != suffix:
        raise FaShimError(
            f"torch-python {python} is Python {answer.get('python_version')} (extension suffix "
            f"{answer['ext_suffix']}), but this build runs under Python {version} "
            f"({sys.executable}, {suffix}): torch's compiled modules load only into the Python "
            "they were built for, and the wheel is tagged for the Python that builds it.",
            fix=f"point torch-python at a Python {version} interpreter, or run the installer "
            f"with Python {answer.get('python_version')} (e.g. `{python} -m pip install ...`, "
            f"or `uv pip install --python {python} ...`).",
        )
    if "error" in answer:
        raise FaShimError(
            f"torch is not importable by {python}, the interpreter named by setting torch-python "
            f"({answer['error']}).",
            fix="install torch into that environment first, or point torch-python at the "
            "interpreter of the environment that has it.",
        )
    return _info(answer, f"setting torch-python ({python})")


@functools.cache
def probe(torch_python: Path | None = None, cache_dir: Path | None = None) -> TorchInfo:
    """The torch the build compiles against; with a cache_dir, one probed before is not imported."""
    if torch_python is not None:
        info = _probe_named(Path(torch_python), cache_dir)
    else:
        answer, isolated = _probe_with_fallback(sys.executable, cache_dir)
        if "error" in answer:
            raise _not_found(answer["error"])
        past = "the target environment, found past the isolated build environment"
        info = _info(answer, past if isolated else "the build environment")
    _log.info(
        f"building against torch {info.version} (CUDA {info.cuda}, "
        f"_GLIBCXX_USE_CXX11_ABI={info.abi}, {info.cxx_std}) at {info.package_dir}, "
        f"interpreter {info.python}, from {info.found_by}"
    )
    return info
