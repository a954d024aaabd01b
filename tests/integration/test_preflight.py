"""Toolchain preflight: the build's own compile command lines compile a probe before any kernel;
a compiler that forces its own ABI or C++ standard over fa-shim's flags is refused in seconds.
The real 2.8.3 sdist under a CUDA torch: tests/e2e/test_preflight_real_sdist.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
from conftest import PY, REPO, TOOLS, pip_wheel_cmd, run, sample_settings

from fa_backend.toolchain import _compilers, _preflight

ABI0_LAST = TOOLS / "abi0-last-g++"  # appends -D_GLIBCXX_USE_CXX11_ABI=0 after everything
OLD_ABI_DEFAULT = TOOLS / "oldabi-g++"  # defaults to ABI 0; fa-shim's later define wins
CXX14_LAST = TOOLS / "cxx14-last-g++"
STATIC_RUNTIME = TOOLS / "static-libstdcxx-g++"  # links libstdc++.a into every shared object


def sample_build(host_venv, sdists, tmp_path, cxx) -> tuple[subprocess.CompletedProcess, float]:
    out = tmp_path / "wheels"
    env = {**os.environ, "CXX": str(cxx), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    started = time.monotonic()
    cmd = pip_wheel_cmd(host_venv, out, "-v", *sample_settings(sdists), "-C", "wheel-cache=false")
    proc = run(cmd, env=env, check=False)
    return proc, time.monotonic() - started


@pytest.mark.slow
def test_a_compiler_that_appends_the_old_abi_is_refused_before_any_kernel(
    host_venv, sample_sdist_dir, tmp_path
):
    proc, _ = sample_build(host_venv, sample_sdist_dir, tmp_path, ABI0_LAST)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"the host compiler `{ABI0_LAST}` (CXX) overrides fa-shim's flags" in text
    assert "_GLIBCXX_USE_CXX11_ABI=0 over fa-shim's -D_GLIBCXX_USE_CXX11_ABI=1" in text
    assert "nothing was compiled yet" in text
    assert "running upstream setup.py (wheel)" not in text  # stopped before the compile run
    # the way out names a compiler that passes the same probe, never the one that failed
    fix = next(line for line in text.splitlines() if "fa-shim: fix:" in line)
    assert "build with CXX=/usr/bin/" in fix and str(ABI0_LAST) not in fix
    assert "pip install" not in fix  # no 'rebuild with fa-shim', which just failed
    assert not list((tmp_path / "wheels").glob("*")) if (tmp_path / "wheels").exists() else True


@pytest.mark.slow
def test_a_compiler_that_only_defaults_to_the_old_abi_passes(host_venv, sample_sdist_dir, tmp_path):
    """devtoolset's default is corrected by the injected define, which comes later."""
    proc, _ = sample_build(host_venv, sample_sdist_dir, tmp_path, OLD_ABI_DEFAULT)
    assert proc.returncode == 0, proc.stderr
    assert list((tmp_path / "wheels").glob("*.whl"))


def test_the_probe_reads_abi_and_standard_from_real_objects(tmp_path):
    cmd = ["g++", "-std=c++20", "-D_GLIBCXX_USE_CXX11_ABI=1", "-c", "x.cpp", "-o", "x.o"]
    good = _preflight.probe(_preflight.Command("cxx", "x.cpp", tuple(cmd)), tmp_path, tmp_path)
    assert (good["abi"], good["cplusplus"]) == (1, 202002) and not _preflight.problems(good)
    cmd[0] = str(CXX14_LAST)
    forced = _preflight.probe(_preflight.Command("cxx", "x.cpp", tuple(cmd)), tmp_path, tmp_path)
    assert _preflight.problems(forced) == ["__cplusplus=201402 over fa-shim's -std=c++20"]
    cmd[0] = str(ABI0_LAST)
    old = _preflight.probe(_preflight.Command("cxx", "x.cpp", tuple(cmd)), tmp_path, tmp_path)
    assert old["abi"] == 0 and "_GLIBCXX_USE_CXX11_ABI=0" in _preflight.problems(old)[0]


def test_the_cxx_probe_is_linked_and_a_static_libstdcxx_is_seen(tmp_path):
    cmd = ["g++", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1", "-fPIC", "-c", "x.cpp", "-o", "x.o"]
    good = _preflight.probe(_preflight.Command("cxx", "x.cpp", tuple(cmd)), tmp_path, tmp_path)
    assert good["runtime_copy"] == [] and not good["error"]
    cmd[0] = str(STATIC_RUNTIME)
    static = _preflight.probe(_preflight.Command("cxx", "x.cpp", tuple(cmd)), tmp_path, tmp_path)
    assert "__gxx_personality_v0" in static["runtime_copy"]
    assert not _preflight.problems(static)  # ABI and standard are right: only the link is wrong


@pytest.mark.slow
def test_a_compiler_that_links_libstdcxx_statically_is_refused_before_any_kernel(
    host_venv, sample_sdist_dir, tmp_path
):
    proc, _ = sample_build(host_venv, sample_sdist_dir, tmp_path, STATIC_RUNTIME)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"the host compiler `{STATIC_RUNTIME}` (CXX) links libstdc++ statically" in text
    assert "__gxx_personality_v0" in text and "nothing was compiled yet" in text
    assert "running upstream setup.py (wheel)" not in text
    fix = next(line for line in text.splitlines() if "fa-shim: fix:" in line)
    assert "libstdc++ is shared" in fix and str(STATIC_RUNTIME) not in fix


def test_a_flag_variable_is_named_as_the_way_out(tmp_path, monkeypatch):
    monkeypatch.setenv("CXXFLAGS", "-O2 -D_GLIBCXX_USE_CXX11_ABI=0")
    cmd = [str(ABI0_LAST), "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1", "-c", "x.cpp", "-o", "x.o"]
    with pytest.raises(_preflight.FaShimError) as info:
        _preflight.check([_preflight.Command("cxx", "x.cpp", tuple(cmd))], tmp_path)
    assert info.value.fix.startswith(
        "remove the flag from CXXFLAGS='-O2 -D_GLIBCXX_USE_CXX11_ABI=0'"
    )


@pytest.mark.skipif(not _compilers.find_nvccs(), reason="no nvcc here")
def test_nvcc_with_a_forcing_host_compiler_is_refused(tmp_path):
    nvcc = str(_compilers.find_nvccs()[0].path)
    flags = ["-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1", "-c", "x.cu", "-o", "x.o"]
    ok = [nvcc, *flags]
    assert _preflight.check([_preflight.Command("nvcc", "x.cu", tuple(ok))], tmp_path)
    bad = [nvcc, "-ccbin", str(ABI0_LAST), *flags]
    with pytest.raises(
        _preflight.FaShimError, match=re.escape(f"nvcc's host compiler `{ABI0_LAST}`")
    ):
        _preflight.check([_preflight.Command("nvcc", "x.cu", tuple(bad))], tmp_path)


def test_doctor_runs_the_same_probe():
    env = {**os.environ, "PYTHONPATH": str(REPO), "CXX": str(ABI0_LAST)}
    proc = run([PY, "-m", "fa_backend", "doctor", "--json"], check=False, env=env)
    report = json.loads(proc.stdout)
    assert report["preflight"]["ok"] is False
    assert any("overrides fa-shim's flags" in p["cause"] for p in report["problems"])
    env["CXX"] = "g++"
    proc = run([PY, "-m", "fa_backend", "doctor", "--json"], check=False, env=env)
    assert json.loads(proc.stdout)["preflight"]["ok"] is True
