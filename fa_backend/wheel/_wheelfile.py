"""A small, deterministic wheel writer (sorted entries, fixed times and modes, members streamed,
RECORD last, an atomic publish), and the check of a wheel's RECORD against its members."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from ..core import _atomic

_MIN_EPOCH = 315532800  # 1980-01-01, the earliest time a zip entry can hold
_CHUNK = 1024 * 1024

Opener = Callable[[], IO[bytes]]  # opens one member's content for reading


def _sha256(src: IO[bytes], dst: IO[bytes] | None = None) -> tuple[str, int]:
    """RECORD's form of a stream's sha256 (urlsafe base64, no padding) and its size; the bytes
    are copied into dst on the way when given."""
    sha, size = hashlib.sha256(), 0
    while chunk := src.read(_CHUNK):
        sha.update(chunk)
        size += len(chunk)
        if dst is not None:
            dst.write(chunk)
    return base64.urlsafe_b64encode(sha.digest()).rstrip(b"=").decode(), size


class WheelWriter:
    def __init__(self, path: Path, dist_info: str) -> None:
        self.path, self.dist_info = path, dist_info
        self._entries: dict[str, tuple[Opener, int, int]] = {}

    def add(self, arcname: str, data: bytes, mode: int = 0o644) -> None:
        self.add_stream(arcname, lambda: io.BytesIO(data), len(data), mode)

    def add_stream(self, arcname: str, opener: Opener, size: int, mode: int = 0o644) -> None:
        """An entry of `size` bytes read from opener() when the wheel is written."""
        if arcname in self._entries:
            raise ValueError(f"duplicate wheel entry {arcname}")
        self._entries[arcname] = (opener, size, mode)

    def write(self) -> Path:
        """Write everything, RECORD last, to a temporary name; rename into place when complete."""
        names = sorted(self._entries, key=lambda n: (n.startswith(self.dist_info + "/"), n))
        with (
            _atomic.writing(self.path) as raw,
            zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as zf,
        ):
            record = io.StringIO()
            rows = csv.writer(record, lineterminator="\n")
            for name in names:
                opener, size, mode = self._entries[name]
                with opener() as src:
                    digest = self._zip(zf, name, src, size, mode)
                rows.writerow([name, f"sha256={digest}", size])
            rows.writerow([f"{self.dist_info}/RECORD", "", ""])
            data = record.getvalue().encode()
            self._zip(zf, f"{self.dist_info}/RECORD", io.BytesIO(data), len(data), 0o644)
        return self.path

    @staticmethod
    def _zip(zf: zipfile.ZipFile, name: str, src: IO[bytes], size: int, mode: int) -> str:
        """Deflate src into the entry `name`; its urlsafe sha256 as RECORD writes it."""
        # SOURCE_DATE_EPOCH when set (part of the fingerprint), else a fixed time: the clock
        # of the build never reaches the wheel's bytes
        epoch = max(int(os.environ.get("SOURCE_DATE_EPOCH") or _MIN_EPOCH), _MIN_EPOCH)
        info = zipfile.ZipInfo(name, date_time=time.gmtime(epoch)[:6])
        # executable or not is the fact; the rest of the mode was the builder's umask
        info.external_attr = (0o100000 | (0o755 if mode & 0o111 else 0o644)) << 16
        info.create_system = 3  # unix, whatever the platform writes by default
        info.compress_type = zipfile.ZIP_DEFLATED
        info.file_size = size  # decides zip64 up front, as writestr does from the data
        with zf.open(info, "w") as dst:
            return _sha256(src, dst)[0]


def read_prepared_metadata(metadata_directory: Path, dist_info: str) -> str:
    """The METADATA build_wheel was handed: pip passes the dist-info directory itself, other
    frontends the directory holding it; "" when there is none."""
    prepared = metadata_directory / "METADATA"
    if not prepared.is_file():
        prepared = metadata_directory / dist_info / "METADATA"
    return prepared.read_text(encoding="utf-8") if prepared.is_file() else ""


def publish(wheel: Path, out_dir: Path) -> Path:
    """Copy a finished wheel into out_dir under a temporary name, then rename it into place."""
    target = out_dir / wheel.name
    with _atomic.writing(target) as dst, wheel.open("rb") as src:
        shutil.copyfileobj(src, dst)
    return target


def problems(wheel: Path, limit: int = 10) -> list[str]:
    """How the members differ from RECORD (empty: not at all); a zip's CRC misses an edited
    member with a fresh CRC. Raises zipfile.BadZipFile or OSError for a file not a zip."""
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
                got, size = _sha256(member)
            if got != value:
                found.append(f"{name}: sha256 {got} differs from RECORD's {value}")
            elif len(entry) > 1 and entry[1] and entry[1] != str(size):
                found.append(f"{name}: {size} bytes, RECORD says {entry[1]}")
        rows.pop(records[0], None)
        found += [f"{name} is in RECORD but not in the wheel" for name in rows]
    return found[:limit] + ([f"... {len(found) - limit} more"] if len(found) > limit else [])
