"""Runs the upstream build child: full log to a file, echo under verbose (progress is
_progress's, from the launcher's records), and the out-of-memory diagnosis that drives the
retry with fewer jobs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from ..core import _failures, _log
from ..resources import process_session
from ..resources.process_session import PARENT_ENV

# The compiler's own words when it (or its cc1plus/cicc/ptxas) dies of SIGKILL, and ours.
_OOM = re.compile(
    r"killed by signal 9|Killed signal terminated program|died due to signal 9|"
    r"signal 9 \(Kill|^Killed$|exit status 137",
    re.MULTILINE,
)


def run_logged(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[int, str]:
    """Run to completion; return (exit status, this run's output)."""

    lines: list[str] = []
    with log.open("a", buffering=1) as out:  # whole lines: _progress appends to it too
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env={**env, PARENT_ENV: str(os.getpid())},  # the child ends with us (the driver)
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,  # its own session: stopped as a whole (see below)
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                out.write(line)
                lines.append(line)
                if _log.is_verbose():
                    sys.stderr.write(line)
            code = proc.wait()
        except BaseException as exc:  # Ctrl-C, a full disk for the log: no compiler outlives us
            stop_group(proc)
            _failures.name_it(exc, log)
            raise
    if code == -signal.SIGINT:  # the group got Ctrl-C before we did
        raise KeyboardInterrupt
    return code, "".join(lines)


def stop_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """End the child's whole session (ninja, the launchers, the compilers, orphans included):
    SIGTERM, then SIGKILL what is left after `grace` seconds (process_session)."""
    process_session.end(proc.pid, grace)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def killed_for_memory(output: str) -> bool:
    return bool(_OOM.search(output))
