"""Whole-or-nothing file writes: readers see the old file or the new one, never a part."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from . import _failures

_UMASK_LOCK = threading.Lock()


def umask() -> int:
    """The process umask, from /proc/self/status, else set and restored under a lock."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    with _UMASK_LOCK:
        current = os.umask(0o022)
        os.umask(current)
    return current


@contextlib.contextmanager
def writing(target: Path) -> Iterator[BinaryIO]:
    """A temporary file beside target (.fa-shim-*.part) renamed into place once the block
    completes, removed if it fails; 0o666 & ~umask as open() gives (not mkstemp's 0600)."""
    target.parent.mkdir(parents=True, exist_ok=True)  # 0o777 & ~umask: mkdir applies it
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".fa-shim-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~umask())
            yield f
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        _failures.name_it(exc, target)
        raise


def write(target: Path, data: bytes) -> Path:
    """Write data to target through a temporary file beside it and one rename."""
    with writing(target) as f:
        f.write(data)
    return target


def unwritable(directory: Path) -> str | None:
    """Why no file can be written in directory (made if missing), or None when one can: a byte
    written and synced, so a full disk or quota says so too (an empty file needs no block)."""
    if directory.exists() and not directory.is_dir():
        return "a file is in the way: not a directory"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".fa-shim-", suffix=".part") as f:
            f.write(b"\0")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        return exc.strerror or str(exc)
    return None
