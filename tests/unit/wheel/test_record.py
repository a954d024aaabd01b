"""wheel/_wheelfile.problems: a member edited after the build (its zip CRC valid, RECORD stale),
added or removed is found; an untouched wheel written by WheelWriter has none."""

from __future__ import annotations

import zipfile
from pathlib import Path

from fa_backend.wheel import _wheelfile
from fa_backend.wheel._wheelfile import WheelWriter

DIST_INFO = "demo-1.0.dist-info"


def _wheel(path: Path) -> Path:
    writer = WheelWriter(path, DIST_INFO)
    writer.add("demo/__init__.py", b"print('hello')\n")
    writer.add("demo/_C.so", b"\x7fELF" + bytes(100), 0o755)
    writer.add(f"{DIST_INFO}/METADATA", b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
    return writer.write()


def _rewrite(src: Path, dst: Path, change) -> Path:
    """A copy through zipfile (fresh CRCs): change(name, data) -> data or None to drop it."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = change(info.filename, zin.read(info))
            if data is not None:
                zout.writestr(info, data)
    return dst


def test_an_untouched_wheel_matches_its_record(tmp_path):
    assert _wheelfile.problems(_wheel(tmp_path / "demo-1.0-py3-none-any.whl")) == []


def test_an_edited_member_with_a_valid_crc_is_found(tmp_path):
    good = _wheel(tmp_path / "demo-1.0-py3-none-any.whl")
    bad = _rewrite(
        good,
        tmp_path / "bad.whl",
        lambda n, d: d.replace(b"hello", b"HELLO") if n == "demo/__init__.py" else d,
    )
    with zipfile.ZipFile(bad) as zf:
        assert zf.testzip() is None  # the zip layer sees nothing wrong
    (problem,) = _wheelfile.problems(bad)
    assert problem.startswith("demo/__init__.py: sha256 ") and "differs from RECORD" in problem


def test_an_added_and_a_removed_member_are_found(tmp_path):
    good = _wheel(tmp_path / "demo-1.0-py3-none-any.whl")
    dropped = _rewrite(good, tmp_path / "d.whl", lambda n, d: None if n == "demo/_C.so" else d)
    assert _wheelfile.problems(dropped) == ["demo/_C.so is in RECORD but not in the wheel"]

    def add(name, data):
        return data

    added = _rewrite(good, tmp_path / "a.whl", add)
    with zipfile.ZipFile(added, "a") as zf:
        zf.writestr("demo/evil.py", "import os\n")
    assert _wheelfile.problems(added) == ["demo/evil.py is not in RECORD"]


def test_a_wheel_without_record_says_so(tmp_path):
    good = _wheel(tmp_path / "demo-1.0-py3-none-any.whl")
    bare = _rewrite(good, tmp_path / "b.whl", lambda n, d: None if n.endswith("RECORD") else d)
    assert _wheelfile.problems(bare) == ["0 .dist-info/RECORD files (a wheel has one)"]
