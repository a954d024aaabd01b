"""A build tree at the same absolute path on every node, so that a shared compiler cache hits:
nvcc hands cudafe++ and cicc the .cu file's resolved absolute path, which sccache hashes as it
is, and the device code records it. The slot named by the sources, /tmp/fa-shim-src-<digest>,
whatever else builds on the node; while another build of those sources holds it, the next one
waits (a second path would compile other bytes under the same object keys). A slot is held by a
flock on its .lock file (docs/guides/fleet.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from ..core import _log

ROOT = Path("/tmp")  # not TMPDIR: that differs per node and per job
PREFIX = "fa-shim-src-"
POLL = 1.0  # seconds between tries while another build of the same sources holds the slot


def _lock(path: Path) -> int | None:
    """An open file descriptor for the slot's lock, locked once the build holding it (if any)
    lets go; None when it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # other users take it after us
    except PermissionError:
        try:  # another user's lock file: flock needs no write access
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
    except OSError:
        return None
    waited = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if not waited:
                _log.info(
                    f"waiting for {path}: another build of these sources compiles there (the "
                    "device code records its path, so every build of them compiles from one)"
                )
                waited = True
            time.sleep(POLL)
        except OSError:
            os.close(fd)
            return None


@contextlib.contextmanager
def place(scratch: Path, enabled: bool, sources: dict, keep: bool = False) -> Iterator[Path]:
    """Where to prepare and compile: `scratch` itself, or with `enabled` the slot `sources`
    (the flavour's identity of what it lays out) names, once no other build holds it; `scratch`
    with a warning where the slot cannot be made. With `keep` (setting keep-build-dir) the
    slot's tree is moved into scratch at the end."""
    if not enabled:
        yield scratch
        return
    identity = json.dumps(sources, sort_keys=True, default=str).encode()
    slot = ROOT / f"{PREFIX}{hashlib.sha256(identity).hexdigest()[:16]}"
    fd = _lock(slot.with_name(f"{slot.name}.lock"))
    if fd is not None:
        try:
            shutil.rmtree(slot, ignore_errors=True)  # what a killed build left (its lock is free)
            slot.mkdir(mode=0o700)
        except OSError as e:  # another user's leftovers, or a file there: not ours to remove
            os.close(fd)
            fd, why = None, f"{slot} cannot be made ({e.strerror})"
    else:
        why = f"{slot}.lock cannot be opened or locked"
    if fd is None:
        _log.warn(
            f"{why}: compiling in the scratch directory, so other nodes' compiles will not hit "
            "and no kernel object is kept (its device code records that path)"
        )
        yield scratch
        return
    _log.info(
        f"compiling from {slot} (the same path for every build: reproducible device code, "
        "compiler-cache hits across nodes)"
    )
    try:
        yield slot
    finally:
        if keep:
            shutil.move(str(slot / "src"), str(scratch / "src"))
        shutil.rmtree(slot, ignore_errors=True)
        os.close(fd)  # releases the lock
