"""The wheel writer on real files: RECORD as csv (read back by `wheel`'s own reader, which checks
every hash), the member order, reproducibility under SOURCE_DATE_EPOCH, and atomicity."""

from __future__ import annotations

import csv
import io
import zipfile

import pytest
from wheel.wheelfile import WheelFile

from fa_backend.wheel._wheelfile import WheelWriter

DIST_INFO = "demo-1.0.dist-info"
ODD = 'demo/odd, "quoted" name.py'  # a comma and quotes: only csv quoting keeps RECORD parseable


def _write(path, order=None):
    entries = {
        "demo/__init__.py": b"x = 1\n",
        ODD: b"y = 2\n",
        "demo/_ext.so": bytes(range(256)) * 4096,
        f"{DIST_INFO}/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
        f"{DIST_INFO}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
        "aaa_first_alphabetically.py": b"",
    }
    writer = WheelWriter(path, DIST_INFO)
    for name in order or entries:
        if name == "demo/_ext.so":  # streamed, as repack adds upstream's members
            data = entries[name]
            writer.add_stream(name, lambda data=data: io.BytesIO(data), len(data), 0o755)
        else:
            writer.add(name, entries[name])
    return writer.write(), entries


def test_record_is_csv_and_every_hash_checks_out(tmp_path):
    wheel, entries = _write(tmp_path / "demo-1.0-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        record = zf.read(f"{DIST_INFO}/RECORD").decode()
    rows = list(csv.reader(io.StringIO(record)))
    assert [r[0] for r in rows] == [
        *sorted(entries, key=lambda n: (n.startswith(DIST_INFO), n)),
        f"{DIST_INFO}/RECORD",
    ]
    assert rows[-1] == [f"{DIST_INFO}/RECORD", "", ""]
    assert '"demo/odd, ""quoted"" name.py"' in record  # quoted as csv does, not split
    sizes = {r[0]: int(r[2]) for r in rows[:-1]}
    assert sizes == {name: len(data) for name, data in entries.items()}
    with WheelFile(wheel) as wf:  # wheel's reader verifies each member against RECORD
        for name, data in entries.items():
            assert wf.read(name) == data


def test_members_in_order_dist_info_last_record_last_modes_kept(tmp_path):
    wheel, _ = _write(tmp_path / "demo-1.0-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        infos = zf.infolist()
    names = [i.filename for i in infos]
    assert names == [
        "aaa_first_alphabetically.py",
        "demo/__init__.py",
        "demo/_ext.so",
        ODD,
        f"{DIST_INFO}/METADATA",
        f"{DIST_INFO}/WHEEL",
        f"{DIST_INFO}/RECORD",
    ]
    modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in infos}
    assert modes["demo/_ext.so"] == 0o755 and modes["demo/__init__.py"] == 0o644
    assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in infos)


def test_same_source_date_epoch_gives_the_same_bytes(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    first, entries = _write(tmp_path / "a" / "demo-1.0-py3-none-any.whl")
    second, _ = _write(tmp_path / "b" / "demo-1.0-py3-none-any.whl", order=reversed(entries))
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as zf:
        assert {i.date_time for i in zf.infolist()} == {(2023, 11, 14, 22, 13, 20)}
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000002")  # zip times have 2 s steps
    third, _ = _write(tmp_path / "c" / "demo-1.0-py3-none-any.whl")
    assert third.read_bytes() != first.read_bytes()


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    target = tmp_path / "demo-1.0-py3-none-any.whl"

    def broken():
        raise OSError("the source vanished")

    writer = WheelWriter(target, DIST_INFO)
    writer.add("demo/__init__.py", b"")
    writer.add_stream("demo/_ext.so", broken, 10)
    with pytest.raises(OSError, match="vanished"):
        writer.write()
    assert list(tmp_path.iterdir()) == []


def test_a_duplicate_entry_is_refused(tmp_path):
    writer = WheelWriter(tmp_path / "demo-1.0-py3-none-any.whl", DIST_INFO)
    writer.add("demo/__init__.py", b"")
    with pytest.raises(ValueError, match="duplicate"):
        writer.add("demo/__init__.py", b"")
