"""What torch will the build compile against? Asked in a child interpreter, answered as JSON.

The backend process itself never imports torch: under pip's build isolation torch is hidden from
it, and a probe keeps the hooks fast and lets us look past the isolation overlay (see `probe`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from packaging.version import Version

from . import _log
from ._errors import FaShimError

_PROBE = r"""
import inspect, json, os, re, sys
import torch
from torch.utils import cpp_extension
src = inspect.getsource(cpp_extension.BuildExtension.build_extensions)
std = re.search(r"cpp_flag_prefix \+ '(c\+\+\d+)'", src)
print(json.dumps({
    "version": torch.__version__,
    "cuda": torch.version.cuda,
    "abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
    "cuda_home": cpp_extension.CUDA_HOME,
    "package_dir": os.path.dirname(torch.__file__),
    "cxx_std": std.group(1) if std else "c++17",
    "python": sys.executable,
}))
"""


@dataclasses.dataclass(frozen=True)
class TorchInfo:
    version: str
    cuda: str | None
    abi: int
    cuda_home: str | None
    package_dir: str
    cxx_std: str
    python: str
    isolated: bool  # found only by looking past the frontend's isolated build environment

    @property
    def site_dir(self) -> str:
        return str(Path(self.package_dir).parent)

    @property
    def lib_dir(self) -> Path:
        return Path(self.package_dir) / "lib"

    @property
    def cuda_major(self) -> int | None:
        return Version(self.cuda).major if self.cuda else None

    @property
    def label(self) -> str:
        """Upstream's naming: cu130torch2.11cxx11abiTRUE (CUDA major+minor, torch major.minor)."""
        torch_v = Version(self.version)
        cuda = Version(self.cuda).release if self.cuda else None
        cuda_part = f"cu{cuda[0]}{cuda[1] if len(cuda) > 1 else 0}" if cuda else "cpu"
        return (
            f"{cuda_part}torch{torch_v.major}.{torch_v.minor}cxx11abi{str(bool(self.abi)).upper()}"
        )


def _run_probe(flags: list[str]) -> dict | str:
    proc = subprocess.run(
        [sys.executable, *flags, "-c", _PROBE], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "no output"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@functools.cache
def probe() -> TorchInfo:
    """The torch of this interpreter's environment.

    First as the backend sees it (--no-build-isolation); if that fails, with -E, which drops the
    PYTHONPATH overlay that pip's isolated build uses to hide site-packages: the interpreter is
    the target environment's own, so this finds the torch the wheel will be installed next to,
    and never installs a different one.
    """
    answer = _run_probe([])
    isolated = False
    if not isinstance(answer, dict) and os.environ.get("PYTHONPATH"):
        first_error = answer
        answer = _run_probe(["-E"])
        isolated = isinstance(answer, dict)
        if not isolated:
            answer = first_error
    if not isinstance(answer, dict):
        raise FaShimError(
            f"torch is not importable by {sys.executable} ({answer}).",
            fix="install the torch you will run with into this environment first "
            "(e.g. `pip install torch==2.11.0`), then build with "
            "`pip install --no-build-isolation ./fa-shim`. If your frontend builds in a separate "
            'virtual environment, use uv\'s `no-build-isolation-package = ["flash-attn"]` or '
            "`match-runtime`, or build with --no-build-isolation.",
        )
    info = TorchInfo(isolated=isolated, **answer)
    where = " (found past the isolated build environment)" if isolated else ""
    _log.info(
        f"building against torch {info.version} (CUDA {info.cuda}, "
        f"_GLIBCXX_USE_CXX11_ABI={info.abi}) at {info.package_dir}{where}"
    )
    return info
