"""A small, deterministic wheel writer: sorted entries, SOURCE_DATE_EPOCH times, RECORD last,
and an atomic publish (a temporary file renamed into place only once complete)."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

from . import _failures

_MIN_EPOCH = 315532800  # 1980-01-01, the earliest time a zip entry can hold


def _date_time() -> tuple[int, int, int, int, int, int]:
    epoch = max(int(os.environ.get("SOURCE_DATE_EPOCH", time.time())), _MIN_EPOCH)
    return time.gmtime(epoch)[:6]


class WheelWriter:
    def __init__(self, path: Path, dist_info: str) -> None:
        self.path = path
        self.dist_info = dist_info
        self._entries: dict[str, tuple[bytes, int]] = {}

    def add(self, arcname: str, data: bytes, mode: int = 0o644) -> None:
        if arcname in self._entries:
            raise ValueError(f"duplicate wheel entry {arcname}")
        self._entries[arcname] = (data, mode)

    def write(self) -> Path:
        """Write everything, RECORD last, to a temporary name; rename into place when complete."""
        record_name = f"{self.dist_info}/RECORD"
        names = sorted(self._entries, key=lambda n: (n.startswith(self.dist_info + "/"), n))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".fa-shim-", suffix=".whl.part")
        os.close(fd)
        try:
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
                record = []
                for name in names:
                    data, mode = self._entries[name]
                    self._zip(zf, name, data, mode)
                    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                    record.append(f"{name},sha256={digest.decode()},{len(data)}")
                record.append(f"{record_name},,")
                self._zip(zf, record_name, ("\n".join(record) + "\n").encode(), 0o644)
            os.replace(tmp, self.path)
        except BaseException as exc:
            Path(tmp).unlink(missing_ok=True)
            _failures.name_it(exc, self.path)
            raise
        return self.path

    @staticmethod
    def _zip(zf: zipfile.ZipFile, name: str, data: bytes, mode: int) -> None:
        info = zipfile.ZipInfo(name, date_time=_date_time())
        info.external_attr = (0o100000 | (mode & 0o777)) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, data)


def publish(wheel: Path, out_dir: Path) -> Path:
    """Copy a finished wheel into out_dir under a temporary name, then rename it into place."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".fa-shim-", suffix=".whl.part")
    try:
        with os.fdopen(fd, "wb") as dst, wheel.open("rb") as src:
            shutil.copyfileobj(src, dst)
        target = out_dir / wheel.name
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        _failures.name_it(exc, out_dir / wheel.name)
        raise
    return target
