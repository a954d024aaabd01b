"""The wheel cache's sweep of what killed writers left (.fa-shim-*.part files), on real files
whose ages are set with os.utime."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fa_backend.fleet import _entries

HOUR = 3600


def _file(path: Path, age_s: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"partial")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_partials_of_the_locked_entry_go_at_any_age_shared_ones_only_when_old(tmp_path):
    key = "0123456789abcdef0123456789abcdef"
    mine_fresh = _file(tmp_path / key / ".fa-shim-a.part", 0)  # this entry is locked: no writer
    top_old = _file(tmp_path / ".fa-shim-b.part", HOUR + 120)  # no live writer is that slow
    top_young = _file(tmp_path / ".fa-shim-c.part", HOUR - 120)  # may be a live writer's
    other_entry = _file(tmp_path / "fedcba9876543210fedcba9876543210" / ".fa-shim-d.part", 5 * HOUR)
    wheel = _file(tmp_path / "flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl", 5 * HOUR)
    other_name = _file(tmp_path / "notes.part", 5 * HOUR)

    _entries.clear_partials(tmp_path, key)

    assert not mine_fresh.exists() and not top_old.exists()
    assert top_young.exists()
    assert other_entry.exists()  # another key's lock is not held: its writer may be alive
    assert wheel.exists() and other_name.exists()  # only fa-shim's own .part names


def test_the_age_limit_is_a_parameter(tmp_path):
    key = "0" * 32
    ten_minutes = _file(tmp_path / ".fa-shim-e.part", 600)
    _entries.clear_partials(tmp_path, key, min_age_s=900)
    assert ten_minutes.exists()
    _entries.clear_partials(tmp_path, key, min_age_s=300)
    assert not ten_minutes.exists()


def test_a_missing_entry_or_root_is_nothing_to_sweep(tmp_path):
    _entries.clear_partials(tmp_path / "no-such-root", "0" * 32)
    _entries.clear_partials(tmp_path, "0" * 32)
    assert list(tmp_path.iterdir()) == []
