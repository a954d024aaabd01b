"""One error type and one boundary: every failure reaches the user as one readable message."""

from __future__ import annotations

import functools
import sys
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable[..., object])


class FaShimError(Exception):
    """A failure the user can act on: what went wrong (cause) and what to do (fix)."""

    def __init__(self, cause: str, fix: str | None = None, details: str | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.fix = fix
        self.details = details

    def render(self) -> str:
        lines = [f"fa-shim: error: {self.cause}"]
        if self.details:
            lines += ["", *("  " + line for line in self.details.rstrip().splitlines()), ""]
        if self.fix:
            lines.append(f"fa-shim: fix: {self.fix}")
        return "\n".join(lines)


def boundary(func: F) -> F:
    """Turn FaShimError into one message on stderr and exit status 1 (pip shows it as is)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except FaShimError as exc:
            print("\n" + exc.render(), file=sys.stderr, flush=True)
            raise SystemExit(1) from None

    return wrapper  # type: ignore[return-value]
