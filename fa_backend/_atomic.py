"""Whole-or-nothing file writes: readers see the old file or the new one, never a part."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from . import _failures


@contextlib.contextmanager
def writing(target: Path) -> Iterator[BinaryIO]:
    """A file to write target's content into: a temporary name beside it (.fa-shim-*.part,
    the leftover name the wheel cache sweeps) renamed into place once the block completes;
    removed if it fails."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".fa-shim-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
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
    """Why no file can be created in directory (made if missing), or None when one can."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".fa-shim-", suffix=".part"):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None
