"""Whole-or-nothing writes (fa_backend/core/_atomic.py) on real files: readers see the old file
or the new one, never a part; a failed write leaves the old file and no temporary one; what is
written honours the umask; and a directory no file can be created in is named with the reason."""

from __future__ import annotations

import os
import stat

import pytest

from fa_backend.core import _atomic


def test_a_write_replaces_the_file_whole_with_the_umasks_mode(tmp_path):
    target = tmp_path / "deep" / "METADATA"
    assert _atomic.write(target, b"new\n") == target
    assert target.read_bytes() == b"new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~_atomic.umask()
    assert [p.name for p in target.parent.iterdir()] == ["METADATA"]  # no .part left


def test_a_failed_write_keeps_the_old_file_and_leaves_no_part(tmp_path):
    target = tmp_path / "wheel.whl"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="killed midway"), _atomic.writing(target) as f:
        f.write(b"half of the new")
        raise RuntimeError("killed midway")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["wheel.whl"]


def test_an_oserror_inside_the_write_names_the_target(tmp_path):
    """A full disk raised by a write through the open file names no file; the target it was
    writing is what the message can name."""
    target = tmp_path / "out.whl"
    with pytest.raises(OSError) as info, _atomic.writing(target):
        raise OSError(28, "No space left on device")
    assert info.value.filename == str(target)


def test_the_umask_is_read_without_changing_it():
    before = os.umask(0o027)
    try:
        assert _atomic.umask() == 0o027
        assert os.umask(0o027) == 0o027  # still what it was set to
    finally:
        os.umask(before)


def test_a_writable_directory_is_made_and_none_is_said(tmp_path):
    assert _atomic.unwritable(tmp_path / "new" / "cache") is None
    assert (tmp_path / "new" / "cache").is_dir() and not list(
        (tmp_path / "new" / "cache").iterdir()
    )


def test_a_directory_under_a_file_is_unwritable_with_the_reason(tmp_path):
    (tmp_path / "a-file").write_text("x")  # not a directory: refused even for root
    assert _atomic.unwritable(tmp_path / "a-file" / "cache") == "Not a directory"


def test_a_file_where_the_directory_belongs_is_unwritable_and_left_alone(tmp_path):
    blocker = tmp_path / "objects"
    blocker.write_text("x")
    assert _atomic.unwritable(blocker) == "a file is in the way: not a directory"
    assert blocker.read_text() == "x" and [p.name for p in tmp_path.iterdir()] == ["objects"]


def test_the_probe_leaves_nothing_behind(tmp_path):
    assert _atomic.unwritable(tmp_path) is None and not list(tmp_path.iterdir())
