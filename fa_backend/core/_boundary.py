"""The one boundary: every hook and command ends in one readable message on stderr and an exit
status, whatever failed. SIGTERM, SIGHUP and the frontend's death become an exception, so
Ctrl-C's clean-up runs; the death is noticed by polling getppid(), as PR_SET_PDEATHSIG fires
when the *thread* that started us ends (a frontend may use a worker thread)."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Callable, TypeVar

from . import _failures
from ._errors import FaShimError

F = TypeVar("F", bound=Callable[..., object])
POLL_S = 0.5  # how soon a dead frontend is noticed


class Terminated(KeyboardInterrupt):
    """SIGTERM/SIGHUP or the frontend gone: a KeyboardInterrupt, so Ctrl-C's clean-up runs."""

    def __init__(self, signum: int, frontend_gone: int | None = None) -> None:
        super().__init__(signum)
        self.signum, self.frontend_gone = signum, frontend_gone

    def describe(self) -> str:
        if self.frontend_gone is not None:
            return f"the frontend (pid {self.frontend_gone}) that ran this build is gone"
        return f"terminated by {signal.Signals(self.signum).name}"


@contextlib.contextmanager
def guarded(watch_parent: bool = True) -> Iterator[None]:
    """SIGTERM/SIGHUP and, with `watch_parent`, the parent's death raise Terminated here, once;
    an ignored signal stays ignored (`nohup`); nothing changes outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    parent = os.getppid()
    state: dict = {"gone": None, "fired": False}
    stop = threading.Event()

    def handler(signum, _frame):
        if state["fired"]:
            return
        state["fired"] = True
        raise Terminated(signum, state["gone"])

    def watch() -> None:
        while not stop.wait(POLL_S):
            if os.getppid() != parent:  # reparented: the frontend died
                state["gone"] = parent
                os.kill(os.getpid(), signal.SIGTERM)
                return

    previous = {
        sig: signal.signal(sig, handler)
        for sig in (signal.SIGTERM, signal.SIGHUP)
        if signal.getsignal(sig) is not signal.SIG_IGN
    }
    if watch_parent and signal.SIGTERM in previous:
        threading.Thread(target=watch, name="fa-shim-frontend-watch", daemon=True).start()
    try:
        yield
    finally:
        stop.set()
        for sig, old in previous.items():
            signal.signal(sig, old)


def boundary(func: F, *, frontend: bool = True) -> F:
    """FaShimError (an OSError, a failed helper too) as one message on stderr and exit status 1;
    Ctrl-C 130, SIGTERM/SIGHUP 128 + the signal; with `frontend`, the frontend's death too."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        _failures.begin()
        try:
            with guarded(watch_parent=frontend):
                return func(*args, **kwargs)
        except (FaShimError, OSError, subprocess.CalledProcessError, KeyboardInterrupt) as exc:
            status = 1
            if isinstance(exc, Terminated):
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
