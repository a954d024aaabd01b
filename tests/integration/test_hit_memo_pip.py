"""A wheel-cache hit answered from the memo of an earlier build's plan (pipeline/_hit_memo),
through real pip processes on the sample sdist: served when nothing the plan read changed,
planned again (and still a hit, or a build) when anything did."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from conftest import PY, pip_wheel_cmd, run, sample_settings

pytestmark = pytest.mark.slow

MEMO_HIT = "the plan's inputs are those of an earlier build"


def _wheel(out: Path, sdist_dir: Path, env: dict | None = None):
    cmd = pip_wheel_cmd(PY, out, "-v", *sample_settings(sdist_dir))
    return run(cmd, env={**os.environ, **(env or {})})


def _memos() -> list[Path]:
    return sorted((Path(os.environ["XDG_CACHE_HOME"]) / "fa-shim" / "hits").glob("*.json"))


def test_an_unchanged_hit_is_answered_without_planning(sample_sdist_dir, tmp_path):
    first = _wheel(tmp_path / "a", sample_sdist_dir)
    assert "running upstream setup.py (wheel)" in first.stderr and MEMO_HIT not in first.stderr
    (memo,) = _memos()
    assert stat.S_IMODE(memo.stat().st_mode) == 0o666 & ~_umask()  # the user's cache, umask
    second = _wheel(tmp_path / "b", sample_sdist_dir)
    assert MEMO_HIT in second.stderr and "wheel cache hit" in second.stderr
    # no plan made (no torch probe, toolchain or job sizing to log): the hit and the wheel
    said = [line.strip() for line in second.stderr.splitlines() if "fa-shim:" in line]
    assert len(said) == 2 and MEMO_HIT in said[0] and said[1].startswith("fa-shim: built ")
    (a,), (b,) = (tmp_path / "a").glob("*.whl"), (tmp_path / "b").glob("*.whl")
    assert a.name == b.name and a.read_bytes() == b.read_bytes()


def test_a_changed_program_or_setting_makes_the_plan_again(sample_sdist_dir, tmp_path):
    cxx = tmp_path / "bin" / "g++"
    cxx.parent.mkdir()
    cxx.write_text('#!/bin/sh\nexec g++ "$@"\n')
    cxx.chmod(0o755)
    env = {"CXX": str(cxx)}
    _wheel(tmp_path / "a", sample_sdist_dir, env)
    assert MEMO_HIT in _wheel(tmp_path / "b", sample_sdist_dir, env).stderr
    # the same path, another program (an upgrade in place): the plan asks it again; its
    # --version is the same, so the fingerprint too, and the full path hits
    cxx.write_text('#!/bin/sh\n# upgraded\nexec g++ "$@"\n')
    again = _wheel(tmp_path / "c", sample_sdist_dir, env)
    assert "wheel cache hit" in again.stderr and MEMO_HIT not in again.stderr
    assert MEMO_HIT in _wheel(tmp_path / "d", sample_sdist_dir, env).stderr  # memo of the new
    # a setting from the environment is part of the key
    verbose = _wheel(tmp_path / "e", sample_sdist_dir, {**env, "FA_SHIM_VERBOSE": "true"})
    assert "wheel cache hit" in verbose.stderr and MEMO_HIT not in verbose.stderr
    # a damaged entry is not served from a memo either: the full path refuses it and builds
    wheels = Path(os.environ["XDG_CACHE_HOME"]) / "fa-shim" / "wheels"
    (entry,) = (p for p in wheels.iterdir() if p.is_dir() and p.name != ".locks")
    (cached,) = entry.glob("*.whl")
    cached.write_bytes(cached.read_bytes()[:100])
    damaged = _wheel(tmp_path / "f", sample_sdist_dir, env)
    assert "failed its check" in damaged.stderr and MEMO_HIT not in damaged.stderr


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
