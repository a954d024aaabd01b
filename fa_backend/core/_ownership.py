"""Directories fa-shim may change: a directory a user names (`prepare --build-dir DIR`) is taken
only when missing, empty or marked as fa-shim's, one run at a time (a lock inside it). A run
records what it left (size, mtime); the next takes it back only while all is as recorded: a
file a user added or edited is never deleted. A failed run removes only what it added."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from . import _failures, _hostlock, _log
from ._errors import FaShimError

MARKER = ".fa-shim-build-dir"
# what the last successful run left, {relative path: [size, mtime_ns] or None for a directory};
# written last, removed first: a tree being replaced never carries it
RECORD = ".fa-shim-build-dir.files"
LOCK = ".fa-shim-build-dir.lock"  # and its takeover's LOCK.stale-* names
_TEXT = "fa-shim made this directory and may replace what is in it.\n"


def is_ours(directory: Path) -> bool:
    marker = directory / MARKER
    try:
        return not marker.is_symlink() and marker.read_text() == _TEXT
    except (OSError, UnicodeDecodeError):
        return False


def _own_name(name: str) -> bool:
    return name in (MARKER, RECORD) or name.startswith(LOCK)


def _walk(directory: Path) -> dict[str, list[int] | None]:
    """Every entry under directory but fa-shim's own bookkeeping, as RECORD keeps them."""
    found: dict[str, list[int] | None] = {}
    for root, dirs, files in os.walk(directory):
        for name in [*dirs, *files]:
            path = Path(root, name)
            rel = path.relative_to(directory).as_posix()
            if root == str(directory) and _own_name(name):
                continue
            st = path.lstat()
            is_dir = name in dirs and not path.is_symlink()
            found[rel] = None if is_dir else [st.st_size, st.st_mtime_ns]
    return found


def _not_ours(directory: Path, setting: str) -> list[str]:
    """What in fa-shim's own directory it did not leave there, or that changed since."""
    try:
        recorded = json.loads((directory / RECORD).read_text())
    except (OSError, ValueError):
        raise FaShimError(
            f"{directory} ({setting}) was made by fa-shim but holds no record of the files it "
            "wrote (a prepare that was killed, or one of an older fa-shim), so fa-shim "
            "cannot tell them from files of yours.",
            fix=f"name a new or empty directory for {setting} ({directory} stays as it is).",
        ) from None
    return sorted(rel for rel, facts in _walk(directory).items() if recorded.get(rel, 0) != facts)


def _foreign(directory: Path, setting: str, names: set[str], fix: str) -> FaShimError:
    shown = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
    return FaShimError(
        f"{directory} ({setting}) holds files fa-shim did not make ({shown}); fa-shim "
        "only works in a new or empty directory, or one it made itself, so that it "
        "never replaces or deletes a file of yours.",
        fix=fix,
    )


def refuse_foreign(directory: Path, setting: str, ours: Callable[[Path], bool]) -> None:
    """A directory fa-shim fills run after run (a wheel cache), taken only when it is missing
    or holds nothing `ours` does not call fa-shim's: checked before anything in it changes."""
    try:
        names = {p.name for p in directory.iterdir() if not ours(p)}
    except (FileNotFoundError, NotADirectoryError):
        return  # missing: fa-shim makes it (a file there is the settings' error)
    if names:
        fix = f"name a new or empty directory for {setting}; nothing in {directory} was changed."
        raise _foreign(directory, setting, names, fix)


def claim(directory: Path, setting: str) -> set[str]:
    """Take `directory` (the caller holds its lock), emptied of fa-shim's earlier tree; returns
    the names a failed run must leave there. Refuses someone else's files."""
    names = {p.name for p in directory.iterdir() if not _own_name(p.name)}
    if not names:
        return {p.name for p in directory.iterdir() if p.name == MARKER}
    if not is_ours(directory):
        fix = f"name a new or empty directory for {setting} (fa-shim marks the ones it makes "
        raise _foreign(directory, setting, names, fix + f"with a {MARKER} file).")
    foreign = _not_ours(directory, setting)
    if foreign:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise FaShimError(
            f"{directory} ({setting}) holds files fa-shim did not write or that changed since "
            f"its last prepare there ({shown}); preparing again would replace them, so nothing "
            "was touched.",
            fix=f"move those files out of {directory}, or name a new or empty directory for "
            f"{setting}.",
        )
    (directory / RECORD).unlink()  # no longer a finished tree
    for entry in list(directory.iterdir()):
        if not _own_name(entry.name):
            _remove(entry)
    return {MARKER}


def _remove(entry: Path, quiet: bool = False) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=quiet)
    else:
        entry.unlink(missing_ok=quiet)


def mark(directory: Path) -> None:
    """Mark a directory fa-shim has filled, with the record of what it left."""
    (directory / MARKER).write_text(_TEXT)
    part = directory / f"{RECORD}.part"
    part.write_text(json.dumps(_walk(directory)))
    part.replace(directory / RECORD)


def undo(directory: Path, before: set[str]) -> None:
    """Remove what a failed run added: every entry but those named in `before` and the lock."""
    with contextlib.suppress(OSError):
        for entry in directory.iterdir():
            if entry.name not in before and not entry.name.startswith(LOCK):
                _remove(entry, quiet=True)


@contextlib.contextmanager
def owned(directory: Path, setting: str) -> Iterator[Path]:
    """`directory` locked and claimed for a run, marked when it succeeds; on failure (or Ctrl-C)
    only this run's additions go (and the directory, if the run made it)."""
    _failures.name_place(directory, setting)  # a failure in it names the option
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        target = directory.resolve()  # a link is refused: the directory it names may move
        link = directory.is_symlink() and target.is_dir()
        raise FaShimError(
            f"{directory} ({setting}) is "
            + (f"a symlink to {target}, not a directory itself." if link else "not a directory."),
            fix=f"name the directory: {setting} {target}"
            if link
            else f"name a new or empty directory for {setting}.",
        )
    made = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    lock = _hostlock.HostLock(
        directory / LOCK,
        math.inf,  # while its holder lives (a dead one's is taken over)
        5.0,
        lambda holder: _log.info(
            f"another run is using {directory} ({_hostlock.describe(holder)}); waiting for it"
        ),
        what=setting,
        held_by=f"another run using {directory}",
        fix="wait for that run or stop it.",
    )
    try:
        with lock.held():
            before = claim(directory, setting)
            try:
                yield directory
                mark(directory)
            except BaseException:
                undo(directory, before)
                raise
    except BaseException:
        if made:
            shutil.rmtree(directory, ignore_errors=True)
        raise
