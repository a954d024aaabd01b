"""What the boundary makes of failures that are not FaShimError yet: an OSError (a read-only
directory, a full disk), a helper program that failed, and Ctrl-C. Each becomes one message with
its fix; nothing here decides what was published (the pipeline writes whole files or none)."""

from __future__ import annotations

import errno
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from ._errors import FaShimError

INTERRUPTED = "interrupted: nothing was published"
INTERRUPTED_STATUS = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def directory_of(path: str | os.PathLike | None) -> Path | None:
    """The nearest existing directory at or above path (what a full disk or a mount is)."""
    if not path:
        return None
    here = Path(path).absolute()
    for candidate in (here, *here.parents):
        if candidate.is_dir():
            return candidate
    return None


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
    for candidate in (directory, *directory.parents):
        if candidate in _NAMED:
            return _NAMED[candidate]
    return None


def where_it_is(directory: Path | None, path: str | os.PathLike | None = None) -> str:
    """Which knob moves the directory (the nearest existing one of `path`): the setting that
    named it or `path`; else scratch lives under TMPDIR, fa-shim's own files under the cache
    directory; anything else is a path the user gave (output or build directory)."""
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
        f"no space left on {place}{f' while {what}' if what else ''}; nothing was published.",
        fix="free space there, or point that directory at a larger disk; the sdist and any "
        "cached file are intact (a full disk damages none of them).",
    )


def from_oserror(exc: OSError) -> FaShimError:
    path = exc.filename or exc.filename2
    if exc.errno in NO_SPACE:
        return no_space(directory_of(path))
    reason = exc.strerror or str(exc)
    if exc.errno in NOT_WRITABLE:
        where = directory_of(path)
        named = (named_by(Path(path).absolute()) if path else None) or named_by(where)
        return FaShimError(
            f"cannot write {where_it_is(where, path) if path else 'a file'}"
            f"{f' ({path})' if path else ''}: {reason}.",
            fix=named[1]
            if named
            else "make it writable for this user, or choose another directory (the output "
            "directory of the frontend, --build-dir of prepare, -C cache-dir, TMPDIR).",
        )
    code = errno.errorcode.get(exc.errno or 0, "OSError")
    return FaShimError(
        f"{reason}{f': {path}' if path else ''} ({code}).",
        fix="check that path; nothing was published.",
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
        "nothing was published.",
    )


def name_it(exc: BaseException, path: str | os.PathLike) -> None:
    """Give an OSError raised by a write through an open file (which names no file) the path it
    was writing, so that the message can say which disk is full."""
    if isinstance(exc, OSError) and exc.errno is not None and not exc.filename:
        exc.filename = str(path)


NO_SPACE_TEXT = "No space left on device"


def no_space_in(output: str) -> FaShimError | None:
    """A child's own report of a full disk (a compiler that could not write its object)."""
    for line in output.splitlines():
        if NO_SPACE_TEXT in line or "Disk quota exceeded" in line:
            paths = [p.rstrip(":'\",)") for p in line.split() if p.startswith(("/", "'/"))]
            where = directory_of(paths[0].strip("'")) if paths else None
            return no_space(where or Path(tempfile.gettempdir()), "compiling")
    return None
