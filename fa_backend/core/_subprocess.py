"""The one way fa-shim runs a helper program (ninja, patch, nvcc's probes): any failure becomes
one FaShimError naming the command, the tail of what it printed, and the fix."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ._errors import FaShimError


def completed(
    argv: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """subprocess.run(argv, capture_output=True, text=True) in a process group of its own, killed
    whole when the call ends early: a compiler's cc1plus would outlive its driver."""
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if input is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def run(
    command: Sequence[str | os.PathLike],
    *,
    fix: str,
    cause: str | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run command to completion (text output captured); raise FaShimError unless it exited 0.
    `cause` says what a failure means; the command and its output's tail follow as details."""
    argv = [str(a) for a in command]
    shown = f"`{shlex.join(argv)}`" + (f" in {cwd}" if cwd else "")
    output = ""
    try:
        proc = completed(argv, cwd=cwd, timeout=timeout)
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
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        output = "\n".join(lines[-20:]) or "(it printed nothing)"  # the tail of what it printed
    if cause:
        raise FaShimError(cause, details=f"{failed}\n{output}".strip(), fix=fix)
    raise FaShimError(failed, details=output or None, fix=fix)
