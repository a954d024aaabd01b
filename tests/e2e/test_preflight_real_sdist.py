"""Toolchain preflight on the real 2.8.3 sdist, prepared under the CUDA 13.0 torch 2.11 venv (the
session's): a compiler that forces the old ABI over fa-shim's flags is refused before anything
is extracted or compiled. The probe itself and the sample's builds:
tests/integration/test_preflight.py."""

from __future__ import annotations

import os

import pytest
from conftest import REPO, SHARED_SDISTS, TOOLS, run

ABI0_LAST = TOOLS / "abi0-last-g++"  # appends -D_GLIBCXX_USE_CXX11_ABI=0 after everything


@pytest.mark.slow
def test_a_real_prepare_of_2_8_3_is_refused_at_preflight(torch211_python, tmp_path):
    python = torch211_python
    env = {**os.environ, "CXX": str(ABI0_LAST), "XDG_CACHE_HOME": str(tmp_path / "c")}
    args = [python, "-m", "fa_backend", "prepare", "--build-dir", tmp_path / "b"]
    args += ["-C", f"sdist-dir={SHARED_SDISTS}", "-C", "cuda-archs=90"]
    proc = run(args, cwd=REPO, env=env, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"the host compiler `{ABI0_LAST}` (CXX) overrides fa-shim's flags" in proc.stderr
    assert not (tmp_path / "b").exists()
