"""`python -m fa_backend verify` of upstream's real flash_api.cpp, compiled as a module (kernels
left undefined) against the CUDA 13.0 torch 2.11 venv (the session's), with torch's ABI and with
an old-ABI compiler. The other modules and wheels: tests/integration/test_verify.py."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import CHECK_FAIL_OLD, PY, REPO, SHARED_SDISTS, TOOLS, run

OLD_ABI_CXX = str(TOOLS / "oldabi-g++")
NVCC = Path("/usr/local/cuda-13.0/bin/nvcc")
OLD_ABI_SENTENCE = (
    "built for the old C++ ABI (_GLIBCXX_USE_CXX11_ABI=0), torch uses the new one "
    "(_GLIBCXX_USE_CXX11_ABI=1)"
)


def verify(*args, python=PY) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return run([python, "-m", "fa_backend", "verify", *args], check=False, env=env)


_BUILD_INFO = r"""
import importlib.machinery, json, os, sysconfig, torch
from torch.utils import cpp_extension as ext
try:
    inc = ext.include_paths(device_type="cuda")
except TypeError:
    inc = ext.include_paths(cuda=True)
print(json.dumps({"include": inc + [sysconfig.get_paths()["include"]],
                  "lib": os.path.join(os.path.dirname(torch.__file__), "lib"),
                  "suffix": importlib.machinery.EXTENSION_SUFFIXES[0]}))
"""


def _compile_flash_api(python: Path, cxx: str, out_dir: Path) -> Path:
    """upstream csrc/flash_attn/flash_api.cpp as a module (its kernels left undefined)."""
    sdist = out_dir / "sdist"
    with tarfile.open(SHARED_SDISTS / "flash_attn-2.8.3.tar.gz") as tar:
        wanted = ("/csrc/flash_attn/", "/csrc/cutlass/include/")
        tar.extractall(
            sdist, members=[m for m in tar.getmembers() if any(w in m.name for w in wanted)]
        )
    src = sdist / "flash_attn-2.8.3" / "csrc"
    env = {**os.environ, "CUDA_HOME": str(NVCC.parent.parent)}
    info = json.loads(run([python, "-c", _BUILD_INFO], env=env).stdout.splitlines()[-1])
    module = out_dir / f"flash_attn_2_cuda{info['suffix']}"
    run(
        [cxx, "-w", "-std=c++17", "-fPIC", "-shared", "-O0",
         *(f"-I{p}" for p in info["include"]), f"-I{NVCC.parent.parent / 'include'}",
         f"-I{src / 'flash_attn'}", f"-I{src / 'flash_attn' / 'src'}",
         f"-I{src / 'cutlass' / 'include'}",
         "-DTORCH_EXTENSION_NAME=flash_attn_2_cuda", "-DTORCH_API_INCLUDE_EXTENSION_H",
         src / "flash_attn" / "flash_api.cpp", "-o", module, f"-L{info['lib']}",
         "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", "-lc10_cuda", "-ltorch_cuda"]
    )  # fmt: skip
    return module


@pytest.mark.slow
@pytest.mark.skipif(not NVCC.is_file(), reason="needs the CUDA 13.0 headers")
@pytest.mark.parametrize("cxx", ["g++", OLD_ABI_CXX], ids=["torch-abi", "old-abi"])
def test_real_flash_api_against_cuda_torch(torch211_python, tmp_path, cxx):
    module = _compile_flash_api(torch211_python, cxx, tmp_path)
    proc = verify(module, "--python", torch211_python)
    text = " ".join(proc.stdout.split())
    assert "against torch 2.11.0+cu130 (CUDA 13.0, _GLIBCXX_USE_CXX11_ABI=1)" in proc.stdout
    if cxx == "g++":
        assert proc.returncode == 0, proc.stdout
        assert "PASS  symbols       all" in proc.stdout
        assert "libtorch_cuda.so" in proc.stdout  # the CUDA libraries were searched too
        assert "PASS  abi" in proc.stdout
    else:
        assert proc.returncode == 1, proc.stdout
        assert "FAIL  symbols" in proc.stdout and OLD_ABI_SENTENCE in text
        assert "c10::detail::torchCheckFail" in proc.stdout or CHECK_FAIL_OLD in proc.stdout
        assert (
            "c10::Error::Error(c10::SourceLocation" in proc.stdout or "_ZN3c105Error" in proc.stdout
        )
