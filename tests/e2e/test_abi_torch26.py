"""The ABI proof against torch 2.6 (ABI=0, the session's CUDA 12.4 venv): fa-shim injects 0, and
torch <= 2.6 itself saves a plain build from a new-ABI compiler. Against torch 2.13 (ABI=1):
tests/integration/test_abi.py."""

from __future__ import annotations

import json
import os
import shutil
import zipfile

import pytest
from conftest import PY, SAMPLE, SAMPLE_VERSION, pip_wheel_cmd, run, sample_settings

pytestmark = pytest.mark.slow

IMPORT = "import flash_attn, flash_attn_2_cuda; print('abi', flash_attn_2_cuda.cxx11_abi())"


def test_torch_2_6_gets_abi_0_injected(torch26_python, sample_sdist_dir, tmp_path):
    out = tmp_path / "wheels"
    run(
        pip_wheel_cmd(torch26_python, out, *sample_settings(sample_sdist_dir)),
        env=dict(os.environ),
    )
    (wheel,) = out.glob("*.whl")
    assert f"flash_attn-{SAMPLE_VERSION}+cu124torch2.6cxx11abiFALSE-" in wheel.name
    with zipfile.ZipFile(wheel) as zf:
        prov = json.loads(zf.read(next(n for n in zf.namelist() if n.endswith("provenance.json"))))
    assert prov["torch"]["cxx11_abi"] == 0
    assert prov["injected_flags"][0]["injected"]["cxx"][-2:] == [
        "-std=c++17",
        "-D_GLIBCXX_USE_CXX11_ABI=0",
    ]
    site = tmp_path / "site"
    run([PY, "-m", "pip", "install", "--no-deps", "--target", site, wheel])
    proc = run([torch26_python, "-c", IMPORT], env={**os.environ, "PYTHONPATH": str(site)})
    assert "abi 0" in proc.stdout


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
