"""Whole-or-nothing file writes: readers see the old file or the new one, never a part."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from . import _failures


def write(target: Path, data: bytes) -> Path:
    """Write data to target through a temporary file beside it and one rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    # the same leftover name as _wheelfile.publish: the wheel cache sweeps both
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".fa-shim-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        _failures.name_it(exc, target)
        raise
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
