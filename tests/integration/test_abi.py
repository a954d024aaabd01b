"""The ABI proof: a host compiler that defaults to the old C++ string ABI (RHEL devtoolset style)
breaks a plain upstream-style build against torch 2.13 (ABI=1) and does not break fa-shim's.
Against torch 2.6 (ABI=0), where fa-shim injects 0: tests/e2e/test_abi_torch26.py."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import REPO, SAMPLE, TOOLS, run, sample_settings

pytestmark = pytest.mark.slow

OLD_ABI_CXX = str(TOOLS / "oldabi-g++")
IMPORT = "import flash_attn, flash_attn_2_cuda; print('abi', flash_attn_2_cuda.cxx11_abi())"


def _plain_upstream_style_install(python, tmp_path, **env):
    """What `pip install flash-attn` does today: upstream setup.py, FORCE_BUILD, no fa-shim."""
    source = shutil.copytree(SAMPLE, tmp_path / "sample-src")
    return run(
        [python, "-m", "pip", "install", "--no-build-isolation", "--no-deps", source],
        env={**os.environ, "FLASH_ATTENTION_FORCE_BUILD": "TRUE", **env},
    )


def test_old_abi_compiler_breaks_the_plain_build(host_venv, tmp_path):
    _plain_upstream_style_install(host_venv, tmp_path, CXX=OLD_ABI_CXX)
    proc = run([host_venv, "-c", IMPORT], check=False)
    assert proc.returncode != 0
    assert "undefined symbol: _ZN3c10" in proc.stderr  # c10 API taking the old std::string


def test_old_abi_compiler_is_overridden_by_fa_shim(host_venv, sample_sdist_dir):
    run(
        [
            host_venv,
            "-m",
            "pip",
            "install",
            "--no-build-isolation",
            REPO,
            *sample_settings(sample_sdist_dir),
        ],
        env={**os.environ, "CXX": OLD_ABI_CXX},
    )
    proc = run([host_venv, "-c", IMPORT])
    assert "abi 1" in proc.stdout
