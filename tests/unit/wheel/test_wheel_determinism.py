"""wheel/_wheelfile: the clock and the umask never reach a wheel's bytes."""

from __future__ import annotations

import zipfile

from fa_backend.wheel._wheelfile import WheelWriter


def _write(path, mode):
    writer = WheelWriter(path, "demo-1.0.dist-info")
    writer.add("demo/_C.so", b"\x7fELF", mode)
    writer.add("demo/__init__.py", b"", mode & 0o666)
    return writer.write()


def test_without_source_date_epoch_the_time_is_fixed_and_modes_normalised(tmp_path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    a = _write(tmp_path / "a" / "demo-1.0-py3-none-any.whl", 0o775)  # umask 002's build
    b = _write(tmp_path / "b" / "demo-1.0-py3-none-any.whl", 0o755)  # umask 022's
    assert a.read_bytes() == b.read_bytes()
    with zipfile.ZipFile(a) as zf:
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in zf.infolist()}
    assert modes["demo/_C.so"] == 0o755 and modes["demo/__init__.py"] == 0o644
