"""Directories fa-shim makes inside a cache that others share: the umask, widened to the write
access the cache's root gives its group or everyone (a team's setgid root, a sticky 1777 one),
so that another user can take a lock and replace a damaged entry; the setgid bit is kept."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from ..core._atomic import umask


def mode_for(root: Path) -> int:
    """0o777 & ~umask, widened to what the root lets its group or everyone write."""
    mode = 0o777 & ~umask()
    with contextlib.suppress(OSError):
        st = root.stat()
        if st.st_mode & stat.S_IWGRP:
            mode |= stat.S_IRWXG
        if st.st_mode & stat.S_IWOTH:
            mode |= stat.S_IRWXO
    return mode


def fix_mode(path: Path, root: Path) -> None:
    """Give a directory fa-shim just made its shared mode (mkdir's is masked by the umask)."""
    current = path.stat().st_mode
    os.chmod(path, mode_for(root) | (current & stat.S_ISGID))


def make(path: Path, root: Path) -> Path:
    """path (under root) and each missing directory above it made, with the shared mode."""
    root.mkdir(parents=True, exist_ok=True)
    if path.parent != root and path.parent != path:
        make(path.parent, root)
    try:
        path.mkdir()
    except FileExistsError:
        return path
    fix_mode(path, root)
    return path
