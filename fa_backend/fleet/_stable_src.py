"""A build tree at the same absolute path on every node, so that a shared compiler cache hits:
nvcc hands cudafe++ and cicc the .cu file's resolved absolute path, which sccache hashes as it
is. The slot named by the sources, /tmp/fa-shim-src-<digest>, whatever else builds on the node;
while another build of those sources holds it, the first free of /tmp/fa-shim-src-<n>. A slot
is held by a flock on its .lock file (docs/guides/fleet.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from ..core import _log

ROOT = Path("/tmp")  # not TMPDIR: that differs per node and per job
PREFIX = "fa-shim-src-"
SLOTS = 32


def _lock(name: str) -> int | None:
    """An open, locked file descriptor for the slot, or None when another build holds it."""
    path = ROOT / f"{name}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # other users take it after us
    except PermissionError:
        try:  # another user's lock file: flock needs no write access
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def place(scratch: Path, enabled: bool, sources: dict, keep: bool = False) -> Iterator[Path]:
    """Where to prepare and compile: `scratch` itself, or with `enabled` a held slot directory,
    first the one `sources` (the flavour's identity of what it lays out) names: a numbered slot
    is another one whenever a build of other sources holds slot 0, here or on the next node.
    With `keep` (setting keep-build-dir) the slot's tree is moved into scratch at the end."""
    if not enabled:
        yield scratch
        return
    identity = json.dumps(sources, sort_keys=True, default=str).encode()
    digest = hashlib.sha256(identity).hexdigest()[:16]
    for name in [f"{PREFIX}{digest}", *(f"{PREFIX}{n}" for n in range(SLOTS))]:
        fd = _lock(name)
        if fd is None:
            continue
        slot = ROOT / name
        try:
            shutil.rmtree(slot, ignore_errors=True)  # what a killed build left (its lock is free)
            slot.mkdir(mode=0o700)
        except OSError:  # another user's leftovers: not ours to remove
            os.close(fd)
            continue
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
        return
    _log.warn(
        f"no build slot {ROOT / PREFIX}N could be taken (all {SLOTS} held, or {ROOT} not "
        "writable): compiling in the scratch directory, so other nodes' compiles will not hit"
    )
    yield scratch
