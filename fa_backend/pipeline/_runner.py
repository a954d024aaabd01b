"""Runs the upstream build child: full log to a file, echo under verbose, progress on stderr,
and the out-of-memory diagnosis that drives the retry with fewer jobs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..core import _failures, _log
from ..resources import process_session
from ..resources.upstream_driver import PARENT_ENV
from . import _progress

_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")
# The compiler's own words when it (or its cc1plus/cicc/ptxas) dies of SIGKILL, and ours.
_OOM = re.compile(
    r"killed by signal 9|Killed signal terminated program|died due to signal 9|"
    r"signal 9 \(Kill|^Killed$|exit status 137",
    re.MULTILINE,
)


class Progress:
    """'compiled 31/73 (42%), ~6 min left' at most every `interval` seconds."""

    def __init__(self, interval: float = 30.0) -> None:
        self.interval = interval
        self.start: float | None = None
        self.last_report: float | None = None
        self.done = self.total = 0

    def feed(self, line: str, now: float | None = None) -> str | None:
        match = _NINJA_STEP.match(line)
        if not match:
            return None
        now = time.monotonic() if now is None else now
        if self.start is None:
            self.start = now
        self.done, self.total = int(match.group(1)), int(match.group(2))
        recent = self.last_report is not None and now - self.last_report < self.interval
        if self.done < self.total and recent:
            return None
        self.last_report = now
        return self.message(now)

    def message(self, now: float) -> str:
        percent = 100 * self.done // max(self.total, 1)
        text = f"compiled {self.done}/{self.total} ({percent}%)"
        elapsed = now - (now if self.start is None else self.start)
        if 0 < self.done < self.total and elapsed > 0:
            left = elapsed / self.done * (self.total - self.done)  # the observed rate so far
            text += f", ~{max(1, round(left / 60))} min left"
        return text


def run_logged(
    command: list[str], cwd: Path, env: dict[str, str], log: Path, progress_interval: float = 30.0
) -> tuple[int, str]:
    """Run to completion; return (exit status, this run's output)."""

    progress = Progress(progress_interval)
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
                message = progress.feed(line)
                if message and not _progress.watching_now():  # else the monitor reports
                    _log.info(message)
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


def tu_stats(stats_file: Path) -> list[dict]:
    if not stats_file.is_file():
        return []
    return [json.loads(line) for line in stats_file.read_text().splitlines() if line.strip()]


def compiled(stats_file: Path) -> list[dict]:
    """The translation units compiled so far (not nvcc's own probes, which name no source)."""
    return [r for r in tu_stats(stats_file) if r.get("source") != "?" and r["exit"] == 0]


def compile_span(stats: list[dict]) -> float:
    """Seconds from the first translation unit's start to the last one's end."""
    timed = [r for r in stats if "started" in r]
    if not timed:
        return 0.0
    return max(r["started"] + r["seconds"] for r in timed) - min(r["started"] for r in timed)
