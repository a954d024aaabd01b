"""The one way fa-shim runs a helper program (ninja, patch, nvcc's probes): any failure of it
(non-zero exit, program missing, OSError, timeout) becomes one FaShimError naming the command,
the tail of what it printed, and the fix. The long upstream build runs through _runner."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ._errors import FaShimError

TAIL_LINES = 20


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run(
    command: Sequence[str | os.PathLike],
    *,
    fix: str,
    cause: str | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run command to completion and return it (text output captured); raise FaShimError
    unless it ran and exited 0. `cause`, when given, says what a failure means (e.g. "the patch
    does not apply"); the command, what happened and its output's tail follow as details."""
    argv = [str(a) for a in command]
    shown = f"`{shlex.join(argv)}`" + (f" in {cwd}" if cwd else "")
    output = ""
    try:
        proc = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, errors="replace", timeout=timeout
        )
    except subprocess.TimeoutExpired:
        failed = f"{shown} did not finish within {timeout:g} s."
    except OSError as exc:  # the program missing or not executable, or cwd missing
        missing = isinstance(exc, FileNotFoundError) and exc.filename == argv[0]
        failed = f"{shown} could not be run: " + (
            f"`{argv[0]}` was not found." if missing else f"{exc.strerror or exc}."
        )
    else:
        if proc.returncode == 0:
            return proc
        failed = f"{shown} failed (exit status {proc.returncode})."
        output = tail(proc.stdout + proc.stderr) or "(it printed nothing)"
    if cause:
        raise FaShimError(cause, details=f"{failed}\n{output}".strip(), fix=fix)
    raise FaShimError(failed, details=output or None, fix=fix)
