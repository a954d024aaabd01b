"""Architecture selection against this machine's real tools: the compute capabilities a real
nvcc names (`nvcc --list-gpu-arch`), and the GPUs the driver reports. The selection and mapping
themselves: tests/unit/toolchain/test_archs.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.flavours.fa2 import _releases
from fa_backend.toolchain import _archs
from fa_backend.toolchain._archs import select_archs

NVCC13 = Path("/usr/local/cuda-13.0/bin/nvcc")
DEFAULT = _releases.release("2.8.3").archs.default


@pytest.mark.parametrize("typo", ["95", "99", "85", "98", "129", "91"])
def test_a_compute_capability_the_real_nvcc_does_not_name_is_refused(typo):
    """95 used to become sm_90, 85 sm_80, 129 sm_120: a typo of 98 for 89 built a wheel with no
    code for the user's GPU. Only what `nvcc --list-gpu-arch` names is taken; the fix lists it."""
    if not NVCC13.exists():
        pytest.skip(f"no CUDA 13.0 nvcc at {NVCC13}")
    real = _archs.nvcc_arch_list(NVCC13)
    with pytest.raises(FaShimError) as exc:
        select_archs((typo,), (), None, (), real, DEFAULT)
    assert f"{typo}: not a compute capability the chosen nvcc compiles" in exc.value.cause
    assert "80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121" in exc.value.fix
    for good in ("89", "90", "90a", "121"):  # what it names, with or without a suffix
        assert select_archs((good,), (), None, (), real, DEFAULT).archs == (good,)


@pytest.mark.skipif(not NVCC13.exists(), reason="needs CUDA 13.0 at /usr/local/cuda-13.0")
def test_nvcc_arch_list_of_real_nvcc():
    archs = _archs.nvcc_arch_list(NVCC13)
    assert {"80", "90", "100", "120"} <= set(archs) and "70" not in archs


def test_gpu_capabilities_come_from_the_driver_without_torch():
    """Without a GPU or driver: an empty answer, not an exception. With one: what nvidia-smi,
    the driver's own tool, reports (the GPU acceptance run also compares it with torch)."""
    smi = shutil.which("nvidia-smi")
    query = ["--query-gpu=compute_cap", "--format=csv,noheader"]
    proc = subprocess.run([smi, *query], capture_output=True, text=True) if smi else None
    if proc is None or proc.returncode != 0:
        assert _archs.capabilities() == ()
        return
    expected = {tuple(map(int, line.split("."))) for line in proc.stdout.split()}
    assert set(_archs.capabilities()) == expected


def test_t10_a_script_printing_a_version_is_not_taken_as_an_nvcc(tmp_path):
    """A script answering every call with nvcc's banner passes the version check; its
    --list-gpu-arch banner read as architecture "130" (13.0) gave "use some of 130"."""
    fake = tmp_path / "nvcc"
    fake.write_text('#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.88"\n')
    fake.chmod(0o755)
    with pytest.raises(FaShimError) as exc:
        _archs.nvcc_arch_list(fake)
    assert exc.value.cause == f"{fake} is not nvcc: its --list-gpu-arch names no compute_NN."
    assert exc.value.fix.endswith("or point -C nvcc at a CUDA toolkit's bin/nvcc.")
