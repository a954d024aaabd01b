"""core/_scratch: a scratch directory whose owner lives, one without fa-shim's note, one another
host or pid namespace made and one the user kept are never removed (a SIGKILLed run's is:
tests/integration/test_scratch_killed.py)."""

from __future__ import annotations

import json
import tempfile

import pytest

from fa_backend.core import _scratch


@pytest.fixture
def tmpdir_(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_what_is_alive_unnoted_elsewhere_or_kept_stays(tmpdir_):
    with _scratch.directory("build") as alive:  # this process owns it
        unnoted = tmpdir_ / "fa-shim-build-unnoted"  # an older fa-shim's, or being made
        (unnoted / "src").mkdir(parents=True)
        elsewhere = tmpdir_ / "fa-shim-build-elsewhere"  # a shared TMPDIR: another host's
        elsewhere.mkdir()
        note = {**json.loads((alive / _scratch.NOTE).read_text()), "place": "other-host ns"}
        (elsewhere / _scratch.NOTE).write_text(json.dumps({**note, "pid": 1}))
        with _scratch.directory("build", keep=True) as kept:
            pass
        assert _scratch.sweep() == []
        assert alive.is_dir() and unnoted.is_dir() and elsewhere.is_dir() and kept.is_dir()
    assert not alive.exists() and kept.is_dir() and not (kept / _scratch.NOTE).exists()
