"""The one boundary: every hook and command ends in one readable message on stderr and an exit
status, whatever failed. A failure that is not FaShimError yet (an OSError, a failed helper
program, Ctrl-C) becomes one message with its fix, naming the path, what was being done to it,
and what was published before it (`published`). SIGTERM, SIGHUP and the frontend's death become
an exception, so Ctrl-C's clean-up runs; the death is noticed by polling getppid(), as
PR_SET_PDEATHSIG fires when the *thread* that started us ends (a frontend may use a worker
thread)."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Callable, TypeVar

from ._errors import FaShimError

INTERRUPTED = "interrupted"
INTERRUPTED_STATUS = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


# This run's (one hook's or command's, see begin): where it ran, and the wheels it published
_RUN: dict = {"cwd": None, "published": []}


def begin() -> None:
    """A hook or command starts: nothing published yet; remember the working directory (an error
    naming no file is told against it)."""
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = os.environ.get("PWD")
    _RUN.update(cwd=cwd, published=[])


def published(place: str, path: Path) -> None:
    """This run's whole wheel lies at path (place: "the wheel cache", "the output directory")."""
    _RUN["published"].append(f"{place} ({path})")


def outcome() -> str:
    """Where this run's wheel is, for a message about a failure."""
    done = _RUN["published"]
    return "the wheel is in " + " and ".join(done) if done else "nothing was published"


@contextlib.contextmanager
def doing(what: str) -> Iterator[None]:
    """An OSError in the block says it happened while `what` (the innermost block's)."""
    try:
        yield
    except OSError as exc:
        if not hasattr(exc, "fa_shim_doing"):
            exc.fa_shim_doing = what  # type: ignore[attr-defined]
        raise


def directory_of(path: str | os.PathLike | None) -> Path | None:
    """The nearest existing directory at or above path (what a full disk or a mount is)."""
    if not path or (not os.path.isabs(path) and _cwd_moved()):
        return None  # relative to a working directory that is gone
    here = Path(path).absolute()
    return next((c for c in (here, *here.parents) if c.is_dir()), None)


# Directories a setting or option named (`-C wheel-cache-dir`, `--build-dir`): a failure there
# names that setting, even when the directory lies under TMPDIR or the cache directory.
_NAMED: dict[Path, tuple[str, str]] = {}


def name_place(path: str | os.PathLike | None, knob: str, fix: str | None = None) -> None:
    """Remember that the directory `path` came from `knob` (e.g. "setting sdist-dir"), and what
    to do when it cannot be written."""
    if path:
        fix = fix or f"make it writable for this user, or name another directory with {knob}."
        _NAMED[Path(path).absolute()] = (knob, fix)


def named_by(directory: Path | None) -> tuple[str, str] | None:
    """(knob, fix) of the named directory at or above `directory`, if a knob named one."""
    if directory is None:
        return None
    return next((_NAMED[c] for c in (directory, *directory.parents) if c in _NAMED), None)


def where_it_is(directory: Path | None, path: str | os.PathLike | None = None) -> str:
    """The directory and which knob moves it: the setting that named it, TMPDIR for scratch, the
    cache directory for fa-shim's own files; else a path the user gave."""
    if directory is None:
        return "a directory fa-shim writes"
    named = (named_by(Path(path).absolute()) if path else None) or named_by(directory)
    if named:
        return f"{directory} ({named[0]})"
    scratch = Path(tempfile.gettempdir()).absolute()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").absolute()
    if directory == scratch or scratch in directory.parents:
        return f"{directory} (the build's scratch space: TMPDIR moves it)"
    if directory == cache or cache in directory.parents:
        return f"{directory} (fa-shim's cache: -C cache-dir or XDG_CACHE_HOME moves it)"
    return str(directory)


def no_space(directory: Path | None, what: str = "") -> FaShimError:
    place = where_it_is(directory)
    return FaShimError(
        f"no space left on {place}{f' while {what}' if what else ''}; {outcome()}.",
        fix="free space there, or point that directory at a larger disk; the sdist and any "
        "cached file are intact (a full disk damages none of them).",
    )


def from_oserror(exc: OSError) -> FaShimError:
    path = exc.filename or exc.filename2
    doing = getattr(exc, "fa_shim_doing", None)
    while_ = f" while {doing}" if doing else ""
    reason = exc.strerror or str(exc)
    code = errno.errorcode.get(exc.errno or 0, "OSError")
    if exc.errno in NO_SPACE and (path or not _cwd_moved()):
        return no_space(directory_of(path), doing or "")
    if not path or (not os.path.isabs(path) and _cwd_moved()):
        return _unnamed(reason, code, while_, path)
    if exc.errno in NOT_WRITABLE:
        where = directory_of(path)
        named = named_by(Path(path).absolute()) or named_by(where)
        return FaShimError(
            f"cannot write {where_it_is(where, path)} ({path}){while_}: {reason}; {outcome()}.",
            fix=named[1]
            if named
            else "make it writable for this user, or choose another directory (the output "
            "directory of the frontend, --build-dir of prepare, -C cache-dir, TMPDIR).",
        )
    return FaShimError(f"{reason}: {path} ({code}){while_}; {outcome()}.", fix="check that path.")


def _cwd_moved() -> bool:
    """The working directory is no longer the one the run started in (removed, or replaced)."""
    try:
        now = os.getcwd()
    except OSError:  # gone: a checkout removed, or cloned over
        return True
    return _RUN["cwd"] is not None and now != _RUN["cwd"]


def _unnamed(reason: str, code: str, while_: str, path) -> FaShimError:
    """An OSError that names no file, or a relative one: told against the run's working
    directory (the usual such failure: a checkout replaced under a running build)."""
    cwd = _RUN["cwd"]
    what = f"{reason}: {path}" if path else reason
    if _cwd_moved():
        return FaShimError(
            f"the working directory {cwd} was removed or replaced while fa-shim ran in it "
            f"({what}, {code}){while_}; {outcome()}.",
            fix="run it again once the directory stays in place (a checkout re-synced or "
            "cloned over during a build replaces it).",
        )
    return FaShimError(
        f"{what} ({code}){while_}; the system named no file (fa-shim ran in {cwd}); {outcome()}.",
        fix="check the working directory and the directories fa-shim writes.",
    )


def from_helper(exc: subprocess.CalledProcessError) -> FaShimError:
    command = exc.cmd if isinstance(exc.cmd, str) else shlex.join(map(str, exc.cmd))
    output = exc.stderr or exc.stdout or ""
    if isinstance(output, bytes):
        output = output.decode(errors="replace")
    program = Path(shlex.split(command)[0]).name if command else "a helper"
    return FaShimError(
        f"the helper program {program} failed (exit status {exc.returncode}): `{command}`.",
        details=output.strip()[-2000:] or None,
        fix=f"check that {program} is installed and working (its own message is above); "
        f"{outcome()}.",
    )


def name_it(exc: BaseException, path: str | os.PathLike) -> None:
    """Give an OSError of a write through an open file the path it wrote (which disk is full)."""
    if isinstance(exc, OSError) and exc.errno is not None and not exc.filename:
        exc.filename = str(path)


def no_space_in(output: str) -> FaShimError | None:
    """A child's own report of a full disk (a compiler that could not write its object)."""
    for line in output.splitlines():
        if "No space left on device" in line or "Disk quota exceeded" in line:
            paths = [p.rstrip(":'\",)") for p in line.split() if p.startswith(("/", "'/"))]
            where = directory_of(paths[0].strip("'")) if paths else None
            return no_space(where or Path(tempfile.gettempdir()), "compiling")
    return None


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
        begin()
        try:
            with guarded(watch_parent=frontend):
                return func(*args, **kwargs)
        except (FaShimError, OSError, subprocess.CalledProcessError, KeyboardInterrupt) as exc:
            status = 1
            if isinstance(exc, Terminated):
                error = FaShimError(f"{exc.describe()}: {outcome()}")
                status = 128 + exc.signum
            elif isinstance(exc, KeyboardInterrupt):
                error = FaShimError(f"{INTERRUPTED}: {outcome()}")
                status = INTERRUPTED_STATUS
            elif isinstance(exc, OSError):
                error = from_oserror(exc)
            elif isinstance(exc, subprocess.CalledProcessError):
                error = from_helper(exc)
            else:
                error = exc
            try:
                print("\n" + error.render(), file=sys.stderr, flush=True)
            except OSError:
                pass  # stderr itself is gone (a closed pipe): the exit status still tells
            raise SystemExit(status) from None

    return wrapper  # type: ignore[return-value]
