"""Logging to stderr only: stdout belongs to the frontend."""

from __future__ import annotations

import sys

_verbose = False


def set_verbose(value: bool) -> None:
    global _verbose
    _verbose = value


def is_verbose() -> bool:
    return _verbose


def info(message: str) -> None:
    print(f"fa-shim: {message}", file=sys.stderr, flush=True)


def debug(message: str) -> None:
    if _verbose:
        info(message)


def warn(message: str) -> None:
    print(f"fa-shim: warning: {message}", file=sys.stderr, flush=True)
