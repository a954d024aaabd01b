"""The one boundary: every hook and command ends in one readable message on stderr and an exit
status, whatever failed (FaShimError, an OSError, a helper program, Ctrl-C, a signal or the
frontend's death)."""

from __future__ import annotations

import functools
import subprocess
import sys
from typing import Callable, TypeVar

from . import _failures, _lifeline
from ._errors import FaShimError

F = TypeVar("F", bound=Callable[..., object])


def boundary(func: F, *, frontend: bool = True) -> F:
    """Turn FaShimError into one message on stderr and exit status 1 (pip shows it as is); an
    OSError or a failed helper program becomes one too (_failures), Ctrl-C exit status 130,
    SIGTERM/SIGHUP 128 + the signal. With `frontend` (the PEP 517 hooks) the frontend's death
    stops the call too (_lifeline)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        _failures.begin()
        try:
            with _lifeline.guarded(watch_parent=frontend):
                return func(*args, **kwargs)
        except (FaShimError, OSError, subprocess.CalledProcessError, KeyboardInterrupt) as exc:
            status = 1
            if isinstance(exc, _lifeline.Terminated):
                error = FaShimError(f"{exc.describe()}: {_failures.outcome()}")
                status = 128 + exc.signum
            elif isinstance(exc, KeyboardInterrupt):
                error = FaShimError(f"{_failures.INTERRUPTED}: {_failures.outcome()}")
                status = _failures.INTERRUPTED_STATUS
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
