"""Finished wheels, kept by the full fingerprint of what went into them ("build once, use
everywhere"). The directory doubles as a pip --find-links directory: the latest wheel of each
file name also sits at its top level.

    <root>/<key>/<wheel>          the entry (key = sha256 of the fingerprint)
    <root>/<key>/fingerprint.json what the key was computed from
    <root>/<wheel>                flat copy for `pip install --find-links <root>`
    <root>/.locks/<key>.lock      one builder per key, on any host; the others wait, then reuse
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..core import _atomic, _log
from ..core._errors import FaShimError
from ..wheel._wheelfile import publish
from . import _hostlock


def key(fingerprint: dict) -> str:
    blob = json.dumps(fingerprint, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


@contextlib.contextmanager
def locked(root: Path, entry_key: str, timeout: float, heartbeat: float) -> Iterator[None]:
    """Hold the key's lock; a concurrent builder of the same key, on this host or another one
    sharing the directory, waits here, then finds a hit (see _hostlock for why not flock)."""
    path = root / ".locks" / f"{entry_key}.lock"

    def waiting(holder: dict) -> None:
        _log.info(
            f"another build of the same wheel holds {path} ({_hostlock.describe(holder)}); "
            f"waiting for it (at most {timeout:.0f} s, -C wheel-cache-lock-timeout)"
        )

    with _hostlock.HostLock(path, timeout, heartbeat, waiting).held():
        yield


def lookup(root: Path, entry_key: str, wheel_name: str) -> Path | None:
    path = root / entry_key / wheel_name
    return path if path.is_file() else None


def store(root: Path, entry_key: str, wheel: Path, fingerprint: dict) -> Path:
    """Publish atomically: an interrupted store leaves a .part file, never a partial entry."""
    entry = root / entry_key
    text = json.dumps(fingerprint, indent=1, sort_keys=True, default=str)
    _atomic.write(entry / "fingerprint.json", text.encode())
    stored = publish(wheel, entry)
    publish(wheel, root)  # the flat --find-links view: latest build of this file name
    return stored


def evict(root: Path, entry_key: str) -> None:
    """Remove our own entry; another user's (a shared cache) is only ever replaced by a store."""
    with contextlib.suppress(OSError):
        if (root / entry_key).stat().st_uid != os.getuid():
            return
    shutil.rmtree(root / entry_key, ignore_errors=True)


def clear_partials(root: Path, entry_key: str, min_age_s: float = 3600) -> None:
    """What killed writers left: all of this (locked) entry's, and the shared top level's once
    they are old enough that no live writer can own them."""
    for leftover in (root / entry_key).glob(".fa-shim-*.part"):
        with contextlib.suppress(OSError):
            leftover.unlink()
    for leftover in root.glob(".fa-shim-*.part"):
        with contextlib.suppress(OSError):
            if time.time() - leftover.stat().st_mtime > min_age_s:
                leftover.unlink()


def obtain(
    root: Path,
    fingerprint: dict,
    wheel_name: str,
    out_dir: Path,
    check: Callable[[Path], None],
    build: Callable[[], Path],
    lock_timeout: float,
    heartbeat: float,
) -> Path:
    """The wheel of this fingerprint published into out_dir: the cached one when it passes
    `check`, else a fresh `build()`, stored when the cache is writable. One builder per key:
    the others wait for its lock, then hit."""
    entry_key = key(fingerprint)
    read_only = _atomic.unwritable(root)  # e.g. shared storage mounted read-only
    if read_only:
        _log.warn(f"the wheel cache {root} is not writable ({read_only}): only reading it")
    with (
        contextlib.nullcontext() if read_only else locked(root, entry_key, lock_timeout, heartbeat)
    ):
        wheel = lookup(root, entry_key, wheel_name)
        if wheel:
            _log.info(f"wheel cache hit: {wheel} (fingerprint {entry_key})")
            try:
                check(wheel)  # a damaged entry is never installed
            except FaShimError as exc:
                _log.warn(f"the cached wheel failed its check ({exc.cause}); building it again")
                wheel = None
                if not read_only:
                    evict(root, entry_key)
        if wheel is None:
            wheel = build()
            if not read_only:
                try:
                    clear_partials(root, entry_key)
                    wheel = store(root, entry_key, wheel, fingerprint)
                except OSError as exc:  # full, read-only or another user's: the wheel is good
                    why = exc.strerror or str(exc)
                    _log.warn(
                        f"the wheel cache {root} could not keep this wheel ({why}: "
                        f"{exc.filename or root}); the wheel itself is built"
                    )
        return publish(wheel, out_dir)  # only a complete wheel appears in out_dir
