"""torch <= 2.6 itself saves a plain build from a new-ABI compiler (the session's CUDA 12.4 venv,
ABI=0). That fa-shim injects ABI 0 against torch 2.6 is proven by a real build of flash-attn
2.8.3 with nvcc 12.4: tests/e2e/test_cuda12_builds.py. Against torch 2.13 (ABI=1):
tests/integration/test_abi.py."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import SAMPLE, run

pytestmark = pytest.mark.slow

IMPORT = "import flash_attn, flash_attn_2_cuda; print('abi', flash_attn_2_cuda.cxx11_abi())"


def test_torch_2_6_negative_control_is_saved_by_torch_itself(torch26_python, tmp_path):
    """Recorded observation: torch <= 2.6's cpp_extension appends its own ABI define after the
    compiler's, so even a new-ABI-defaulting compiler yields a working module there. The
    breakage fa-shim prevents is specific to torch >= 2.7 (no define) and to builds outside
    torch's flags."""
    new_abi_cxx = tmp_path / "newabi-g++"
    new_abi_cxx.write_text('#!/bin/sh\nexec g++ -D_GLIBCXX_USE_CXX11_ABI=1 "$@"\n')
    new_abi_cxx.chmod(0o755)
    site = tmp_path / "site"
    source = shutil.copytree(SAMPLE, tmp_path / "sample-src")
    run(
        [
            torch26_python,
            "-m",
            "pip",
            "install",
            "--no-build-isolation",
            "--no-deps",
            "--target",
            site,
            source,
        ],
        env={**os.environ, "FLASH_ATTENTION_FORCE_BUILD": "TRUE", "CXX": str(new_abi_cxx)},
    )
    proc = run([torch26_python, "-c", IMPORT], env={**os.environ, "PYTHONPATH": str(site)})
    assert "abi 0" in proc.stdout
