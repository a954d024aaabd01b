"""The one boundary: every hook and command ends in one readable message on stderr and an exit
status, whatever failed (FaShimError, an OSError, a helper program, Ctrl-C)."""

from __future__ import annotations

import functools
import subprocess
import sys
from typing import Callable, TypeVar

from . import _failures
from ._errors import FaShimError

F = TypeVar("F", bound=Callable[..., object])


def boundary(func: F) -> F:
    """Turn FaShimError into one message on stderr and exit status 1 (pip shows it as is); an
    OSError or a failed helper program becomes one too (_failures), Ctrl-C exit status 130."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (FaShimError, OSError, subprocess.CalledProcessError, KeyboardInterrupt) as exc:
            status = 1
            if isinstance(exc, KeyboardInterrupt):
                error, status = FaShimError(_failures.INTERRUPTED), _failures.INTERRUPTED_STATUS
            elif isinstance(exc, OSError):
                error = _failures.from_oserror(exc)
            elif isinstance(exc, subprocess.CalledProcessError):
                error = _failures.from_helper(exc)
            else:
                error = exc
            try:
                print("\n" + error.render(), file=sys.stderr, flush=True)
            except OSError:
                pass  # stderr itself is gone (a closed pipe): the exit status still tells
            raise SystemExit(status) from None

    return wrapper  # type: ignore[return-value]
