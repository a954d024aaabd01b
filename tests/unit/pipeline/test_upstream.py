"""Upstream's setup.py run under fa-shim's rules (fa_backend/pipeline/_upstream.py), up to the
child process: its environment (the variables a user set for upstream's setup.py scrubbed with a
warning, upstream's own download path switched off, every compiler behind the launcher, the
compiler cache in front of the compilers, jobs and threads) and what a failed run's exit status
and output mean. The run itself (resources/upstream_driver.py in a sealed child) is the
integration and end-to-end tiers'."""

from __future__ import annotations

import shlex
import stat
import sys

import pytest
from conftest import fa2_plan

from fa_backend.flavours._interface import Tools
from fa_backend.pipeline import _stats, _upstream
from fa_backend.pipeline._compile_plan import BARE, Wrappers
from fa_backend.resources import LAUNCHER
from fa_backend.resources.upstream_driver import BLOCKED_EXIT

CPU_TOOLS = Tools(nvcc=None, archs=None, jobs=2, nvcc_threads=None, compiler_cache=None)


@pytest.fixture
def plan(sample_sdist_dir):
    return fa2_plan(sample_sdist_dir)


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    for name in ("CXX", "PYTORCH_NVCC", "MAX_JOBS", "NVCC_THREADS", "CCACHE_BASEDIR"):
        monkeypatch.delenv(name, raising=False)
    for name in ("SCCACHE_BASEDIRS", "SCCACHE_SERVER_UDS"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_upstreams_own_switches_are_fa_shims(plan, scratch, monkeypatch, capsys):
    for name in _upstream._SCRUBBED_ENV:
        monkeypatch.setenv(name, "TRUE")
    env = _upstream.environment(plan, CPU_TOOLS, scratch, None, BARE)
    assert not set(_upstream._SCRUBBED_ENV) & set(env)
    err = capsys.readouterr().err
    for name in _upstream._SCRUBBED_ENV:
        assert (
            f"fa-shim: warning: ignoring {name}: fa-shim decides how the extension is built" in err
        )
    assert env["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"  # never upstream's wheel download
    assert env["BUILD_TARGET"] == "cuda" and env["PYTHONUNBUFFERED"] == "1"
    assert env["TORCH_NO_COMPILER_WRAPPER"] == "1"  # fa-shim places the compiler cache
    assert "NVCC_THREADS" not in env and "PYTORCH_NVCC" not in env
    # set even where nothing compiles: unset, upstream FA2 imports psutil (its setup_requires)
    assert env["MAX_JOBS"] == "1"


def test_nothing_is_scrubbed_or_said_when_the_user_set_nothing(plan, scratch, capsys):
    _upstream.environment(plan, CPU_TOOLS, scratch, None, BARE)
    assert "ignoring" not in capsys.readouterr().err


def test_the_compiler_is_a_launcher_script_recording_into_the_scratch(plan, scratch, monkeypatch):
    monkeypatch.setenv("CXX", "g++ -fdiagnostics-color=never")  # the user's text, as written
    env = _upstream.environment(plan, CPU_TOOLS, scratch, 3, BARE)
    script = scratch / "bin" / "cxx"
    assert env["CXX"] == str(script)
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    stats = _stats.stats_file(scratch)
    assert script.read_text() == (
        "#!/bin/sh\n"
        f"exec {shlex.quote(sys.executable)} {shlex.quote(str(LAUNCHER))} "
        f'{shlex.quote(str(stats))} g++ -fdiagnostics-color=never "$@"\n'
    )
    assert env["MAX_JOBS"] == "3"


def test_without_cxx_the_launcher_runs_cc_plus_plus(plan, scratch):
    env = _upstream.environment(plan, CPU_TOOLS, scratch, None, BARE)
    assert (scratch / "bin" / "cxx").read_text().endswith(' c++ "$@"\n')
    assert env["CXX"] == str(scratch / "bin" / "cxx")


def test_a_compiler_cache_goes_in_front_of_the_compiler_inside_the_launcher(plan, scratch):
    tools = Tools(None, None, jobs=2, nvcc_threads=4, compiler_cache="/opt/cache bin/sccache")
    env = _upstream.environment(plan, tools, scratch, None, BARE)
    assert shlex.split((scratch / "bin" / "cxx").read_text().splitlines()[1])[-3:] == [
        "/opt/cache bin/sccache",
        "c++",
        "$@",
    ]
    assert env["NVCC_THREADS"] == "4"


def test_the_wrappers_settings_reach_the_build_and_the_users_win(plan, scratch, monkeypatch):
    wrappers = Wrappers(env={"CCACHE_BASEDIR": str(scratch), "OTHER": "x"})
    monkeypatch.setenv("CCACHE_BASEDIR", "/mine")
    env = _upstream.environment(plan, CPU_TOOLS, scratch, None, wrappers)
    assert env["CCACHE_BASEDIR"] == "/mine" and env["OTHER"] == "x"


def test_a_blocked_download_is_named_as_the_network_not_a_compile_error(tmp_path):
    log = tmp_path / "build.log"
    report = {"blocked": "urlopen https://github.com/Dao-AILab/flash-attention/releases/x.whl"}
    error = _upstream.failure(BLOCKED_EXIT, report, log, "Traceback ...\nerror: whatever\n")
    assert error.cause == (
        f"upstream's build tried to reach the network ({report['blocked']}); fa-shim forbids "
        "network access during the build so that no prebuilt binary can slip in."
    )
    assert str(log) in error.fix and error.fix.startswith("report this")


def test_a_full_disk_in_the_output_is_no_space(tmp_path):
    output = f"{tmp_path}/b/x.o: fatal error: cannot write {tmp_path}/x.o: No space left on device"
    error = _upstream.failure(1, {}, tmp_path / "log", output)
    assert error.cause.startswith(f"no space left on {tmp_path}")
    assert "while compiling" in error.cause


def test_a_compile_error_shows_the_first_error_and_the_log(tmp_path):
    output = (
        "running build_ext\n[1/2] c++ -c flash_api.cpp\nFAILED: flash_api.o\n"
        "flash_api.cpp:3:1: error: expected ';' before '}' token\n"
        "Traceback (most recent call last):\n  File setup.py\n"
    )
    error = _upstream.failure(1, {}, tmp_path / "build.log", output)
    assert error.cause == "the upstream build failed (exit status 1)."
    assert (
        error.details
        == "FAILED: flash_api.o\nflash_api.cpp:3:1: error: expected ';' before '}' token"
    )
    assert error.fix == f"read the full log: {tmp_path / 'build.log'}"


def test_first_errors_without_an_error_line_is_the_tail():
    output = "\n".join(f"line {i}" for i in range(40))
    assert _upstream.first_errors(output, limit=3) == "line 37\nline 38\nline 39"
    assert _upstream.first_errors("a\nninja: build stopped\nKilled", limit=5) == "Killed"
