"""Directories fa-shim may change: those it made, marked as its own. A directory a user names
(`prepare --build-dir DIR`) is taken only when it is missing, empty or carries fa-shim's marker,
and a failed run removes only the entries it added: a user's files are never deleted."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from . import _failures
from ._errors import FaShimError

MARKER = ".fa-shim-build-dir"
_TEXT = "fa-shim made this directory and may replace what is in it.\n"


def is_ours(directory: Path) -> bool:
    marker = directory / MARKER
    try:
        return not marker.is_symlink() and marker.read_text() == _TEXT
    except (OSError, UnicodeDecodeError):
        return False


def claim(directory: Path, setting: str) -> set[str] | None:
    """Take `directory` for fa-shim, creating it if missing. Returns the names that were in it
    before (None: it did not exist); refuses a directory with someone else's files in it."""
    _failures.name_place(directory, setting)  # a failure in it names the option
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise FaShimError(
            f"{directory} ({setting}) is not a directory.",
            fix=f"name a new or empty directory for {setting}.",
        )
    if not directory.exists():
        directory.mkdir(parents=True)
        before = None
    else:
        before = {p.name for p in directory.iterdir()}
        if before and not is_ours(directory):
            shown = ", ".join(sorted(before)[:3]) + (", ..." if len(before) > 3 else "")
            raise FaShimError(
                f"{directory} ({setting}) holds files fa-shim did not make ({shown}); fa-shim "
                "only works in a new or empty directory, or one it made itself, so that it "
                "never replaces or deletes a file of yours.",
                fix=f"name a new or empty directory for {setting} (fa-shim marks the ones it "
                f"makes with a {MARKER} file).",
            )
    return before


def mark(directory: Path) -> None:
    """Mark a directory fa-shim has filled: a later run may replace what is in it."""
    (directory / MARKER).write_text(_TEXT)


def undo(directory: Path, before: set[str] | None) -> None:
    """Remove what a failed run added: the whole directory if it made it, else the entries
    that were not there before (the marker too, when the directory was empty)."""
    if before is None:
        shutil.rmtree(directory, ignore_errors=True)
        return
    with contextlib.suppress(OSError):
        for entry in directory.iterdir():
            if entry.name in before:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


@contextlib.contextmanager
def owned(directory: Path, setting: str) -> Iterator[Path]:
    """`directory` claimed for a run and marked when it succeeds; on failure (or Ctrl-C) only
    this run's additions go."""
    before = claim(directory, setting)
    try:
        yield directory
        mark(directory)
    except BaseException:
        undo(directory, before)
        raise
