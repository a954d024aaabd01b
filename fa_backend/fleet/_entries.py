"""One wheel-cache entry on disk, whole or absent: <root>/<key>/ holds the wheel,
fingerprint.json and entry.json (the wheel's name, sha256 and size; how and where it was built),
assembled in a `.fa-shim-*.part` directory and renamed into place; a wheel that is not the bytes
entry.json names is never served."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

from ..core import _atomic
from ..core._digest import sha256_of
from ..wheel._wheelfile import publish

ENTRY = "entry.json"
FINGERPRINT = "fingerprint.json"
PARTIAL = ".fa-shim-*.part"  # a writer's temporary name: a file or an entry being assembled
SWEEP_AGE_S = 3600  # a shared .part older than this has no live writer: the next build sweeps it


# Directories in a shared cache get the umask widened to the write access its root gives group or
# others (a setgid team root, a sticky 1777 one): others then take locks, replace damaged entries.
def fix_mode(path: Path, root: Path) -> None:
    """Give a directory fa-shim just made its shared mode (mkdir's is masked by the umask)."""
    mode = 0o777 & ~_atomic.umask()
    with contextlib.suppress(OSError):
        st = root.stat()
        if st.st_mode & stat.S_IWGRP:
            mode |= stat.S_IRWXG
        if st.st_mode & stat.S_IWOTH:
            mode |= stat.S_IRWXO
    os.chmod(path, mode | (path.stat().st_mode & stat.S_ISGID))


def make(path: Path, root: Path) -> Path:
    """path (under root) and each missing directory above it made, with the shared mode."""
    root.mkdir(parents=True, exist_ok=True)
    if path.parent != root and path.parent != path:
        make(path.parent, root)
    with contextlib.suppress(FileExistsError):
        path.mkdir()
        fix_mode(path, root)
    return path


def keep(target: Path, data: bytes) -> None:
    """target written whole (one rename) unless it holds data already: a reader of a shared
    cache never meets a file being replaced for nothing."""
    with contextlib.suppress(OSError):
        if target.read_bytes() == data:
            return
    _atomic.write(target, data)


@dataclasses.dataclass(frozen=True)
class Entry:
    wheel: Path
    sha256: str  # what entry.json records of it


def load(directory: Path, wheel_name: str | None = None) -> Entry | None:
    """The entry in directory when entry.json names a wheel that is there, else None (the
    wheel's bytes are not read: see matches)."""
    try:
        record = json.loads((directory / ENTRY).read_text(encoding="utf-8"))
        name, digest = record["wheel"], record["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(name, str) or "/" in name or name.startswith("."):
        return None  # an entry names a file beside its record, nothing elsewhere
    if wheel_name is not None and name != wheel_name:
        return None
    wheel = directory / name
    return Entry(wheel, digest) if wheel.is_file() else None


def matches(entry: Entry) -> str | None:
    """Why the wheel is not the bytes entry.json names, or None when it is."""
    got = sha256_of(entry.wheel)
    if got != entry.sha256:
        return f"its sha256 is {got}, the entry recorded {entry.sha256}"
    return None


def _write_into(directory: Path, wheel: Path, fingerprint: dict, built: dict) -> Path:
    """fingerprint.json, the wheel, then entry.json (which makes it an entry)."""
    text = json.dumps(fingerprint, indent=1, sort_keys=True, default=str)
    _atomic.write(directory / FINGERPRINT, text.encode())
    stored = publish(wheel, directory)
    record = {"wheel": wheel.name, "sha256": sha256_of(stored), "size": stored.stat().st_size}
    record["built"] = built
    _atomic.write(directory / ENTRY, json.dumps(record, indent=1, sort_keys=True).encode())
    return stored


def store(root: Path, key: str, wheel: Path, fingerprint: dict, built: dict) -> Path:
    """Publish the entry of `key`: a new one whole (a directory renamed into place), an existing
    (damaged) one file by file, the wheel before entry.json, so a reader sees either record."""
    entry = root / key
    if entry.is_dir():
        return _write_into(entry, wheel, fingerprint, built)
    parts = Path(tempfile.mkdtemp(dir=root, prefix=".fa-shim-", suffix=".part"))
    try:
        fix_mode(parts, root)
        _write_into(parts, wheel, fingerprint, built)
        os.rename(parts, entry)
    except BaseException:
        shutil.rmtree(parts, ignore_errors=True)
        raise
    return entry / wheel.name


def clear_partials(root: Path, key: str, min_age_s: float = SWEEP_AGE_S) -> None:
    """What killed writers left: this (locked) entry's .part files, and the top level's once
    no live writer can own them."""
    for leftover in (root / key).glob(PARTIAL):
        with contextlib.suppress(OSError):
            leftover.unlink()
    for leftover in root.glob(PARTIAL):
        with contextlib.suppress(OSError):
            if time.time() - leftover.lstat().st_mtime > min_age_s:
                if leftover.is_dir() and not leftover.is_symlink():
                    shutil.rmtree(leftover)
                else:
                    leftover.unlink()


def all_entries(root: Path) -> list[Path]:
    """The entry directories under root (their names are 32 hex digits), sorted."""
    return sorted(p for p in root.glob("[0-9a-f]" * 32) if p.is_dir())
