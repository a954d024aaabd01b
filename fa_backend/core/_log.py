"""Logging to stderr only: stdout belongs to the frontend."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

_verbose = False
_quiet = False


def set_verbose(value: bool) -> None:
    global _verbose
    _verbose = value


def is_verbose() -> bool:
    return _verbose


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No info lines meanwhile (warnings still): for commands that report, not build."""
    global _quiet
    old, _quiet = _quiet, True
    try:
        yield
    finally:
        _quiet = old


def _say(line: str) -> None:
    with contextlib.suppress(OSError):  # stderr gone (a killed frontend's pipe): clean-up goes on
        print(line, file=sys.stderr, flush=True)


def info(message: str) -> None:
    if not _quiet:
        _say(f"fa-shim: {message}")


def debug(message: str) -> None:
    if _verbose:
        info(message)


def warn(message: str) -> None:
    _say(f"fa-shim: warning: {message}")
