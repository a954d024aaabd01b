"""Directories fa-shim makes inside a cache that others share (the wheel cache's `.locks/` and
entries): they take the umask, and the access the cache's root gives its group and everyone
else. A team's root (setgid, group-writable) gets group-writable directories even under umask
022, a world-writable root (e.g. sticky 1777) world-writable ones, so the third user can take
a lock and replace a damaged entry. The setgid bit (the root's group for new files) is kept."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from ..core._atomic import umask

_GROUP = stat.S_IRWXG
_OTHER = stat.S_IRWXO


def mode_for(root: Path) -> int:
    """0o777 & ~umask, widened to what the root lets its group or everyone write."""
    mode = 0o777 & ~umask()
    with contextlib.suppress(OSError):
        st = root.stat()
        if st.st_mode & stat.S_IWGRP:
            mode |= _GROUP
        if st.st_mode & stat.S_IWOTH:
            mode |= _OTHER
    return mode


def fix_mode(path: Path, root: Path) -> None:
    """Give a directory fa-shim just made its shared mode (chmod, as mkdir's mode is masked by
    the umask); the setgid bit Linux inherited from the parent is kept."""
    current = path.stat().st_mode
    os.chmod(path, mode_for(root) | (current & stat.S_ISGID))


def make(path: Path, root: Path) -> Path:
    """path (a directory under root) made if missing, with the shared mode, as is each missing
    directory between them."""
    root.mkdir(parents=True, exist_ok=True)
    if path.parent != root and path.parent != path:
        make(path.parent, root)
    try:
        path.mkdir()
    except FileExistsError:
        return path
    fix_mode(path, root)
    return path
