"""Scratch directories under TMPDIR, and those a killed run left behind: SIGKILL (the OOM killer,
a batch limit) skips the clean-up, so each notes its owner (boot, pid namespace, pid, start
time) and making one removes this user's directories whose owner is gone on this host."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from . import _hostlock, _log

PREFIX = "fa-shim-"
NOTE = ".fa-shim-owner"


@contextlib.contextmanager
def directory(kind: str, keep: bool = False) -> Iterator[Path]:
    """A fresh `fa-shim-<kind>-*` directory under TMPDIR, removed afterwards unless `keep`
    (then it loses its note: what the user kept is the user's)."""
    path = make(kind)
    try:
        yield path
    finally:
        if keep:
            (path / NOTE).unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)


def make(kind: str) -> Path:
    sweep()
    path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-"))
    pid = os.getpid()
    owner = {"place": _hostlock.this_kernel(), "pid": pid, "started": _hostlock.started(pid)}
    (path / NOTE).write_text(json.dumps(owner))
    return path


def sweep() -> list[Path]:
    """Remove this user's scratch directories whose owner is gone; returns them."""
    removed = []
    here = _hostlock.this_kernel()
    for path in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            if path.is_symlink() or path.stat().st_uid != os.getuid():
                continue
            owner = json.loads((path / NOTE).read_text())
        except (OSError, ValueError):
            continue  # no note, or not readable: not known to be ours
        if not isinstance(owner, dict) or owner.get("place") != here:
            continue  # another host's or pid namespace's: its owner may live unseen
        if isinstance(owner.get("started"), int) and _hostlock.gone_here(
            {**here, "pid": owner.get("pid"), "pid_started": owner["started"]}
        ):  # a note without a start time (an older fa-shim's) tells nothing: kept
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        _log.info(
            f"removed {len(removed)} scratch director{'y' if len(removed) == 1 else 'ies'} "
            f"that killed fa-shim runs left under {tempfile.gettempdir()}"
        )
    return removed
