"""A wheel's RECORD against its members (PEP 376/427): every file listed once with the sha256
and size it has. A zip's CRC only says a member was stored as written; an edited member with a
fresh CRC and a stale RECORD is caught here, not by the zip layer."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import zipfile
from pathlib import Path

_CHUNK = 1024 * 1024


def digest(data_stream) -> tuple[str, int]:
    """RECORD's form of a stream's sha256 (urlsafe base64, no padding) and its size."""
    sha, size = hashlib.sha256(), 0
    while chunk := data_stream.read(_CHUNK):
        sha.update(chunk)
        size += len(chunk)
    return base64.urlsafe_b64encode(sha.digest()).rstrip(b"=").decode(), size


def problems(wheel: Path, limit: int = 10) -> list[str]:
    """What does not match (empty: every member is as RECORD says). Raises zipfile.BadZipFile
    or OSError for a file that does not read as a zip."""
    found: list[str] = []
    with zipfile.ZipFile(wheel) as zf:
        files = [i for i in zf.infolist() if not i.is_dir()]
        records = [i.filename for i in files if i.filename.count("/") == 1]
        records = [n for n in records if n.split("/")[0].endswith(".dist-info")]
        records = [n for n in records if n.endswith("/RECORD")]
        if len(records) != 1:
            return [f"{len(records)} .dist-info/RECORD files (a wheel has one)"]
        rows = {}
        text = zf.read(records[0]).decode("utf-8", "replace")
        for row in csv.reader(io.StringIO(text)):
            if row:
                rows.setdefault(row[0], row[1:])
        for info in files:
            name = info.filename
            if name == records[0]:
                continue
            entry = rows.pop(name, None)
            if entry is None:
                found.append(f"{name} is not in RECORD")
                continue
            want = entry[0] if entry else ""
            algorithm, _, value = want.partition("=")
            if algorithm != "sha256":
                found.append(f"{name}: RECORD gives no sha256 ({want or 'none'})")
                continue
            with zf.open(info) as member:
                got, size = digest(member)
            if got != value:
                found.append(f"{name}: sha256 {got} differs from RECORD's {value}")
            elif len(entry) > 1 and entry[1] and entry[1] != str(size):
                found.append(f"{name}: {size} bytes, RECORD says {entry[1]}")
        rows.pop(records[0], None)
        found += [f"{name} is in RECORD but not in the wheel" for name in rows]
    return found[:limit] + ([f"... {len(found) - limit} more"] if len(found) > limit else [])
