"""Build progress a user can see: the estimate block, a heartbeat, then progress with an ETA
(docs/guides/build-speed.md). pip and uv hide a backend's stderr without -v, so `progress=auto`
also updates one line on /dev/tty; stderr gets plain lines at most every 30 s."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from ..core import _log
from ..core._errors import FaShimError
from ..schedule import _schedule
from ..toolchain import _jobs
from . import _stats

MODES = ("auto", "tty", "stderr", "none")
INTERVAL_ENV = "_FA_SHIM_PROGRESS_INTERVAL_S"
TICK_S = 1.0
SUGGEST_ABOVE_SECONDS = 30 * 60


@dataclasses.dataclass(frozen=True)
class Preview:
    seconds: float | None  # None: the flavour has no cost model
    lines: tuple[str, ...]  # the block, without the "fa-shim: " prefix
    machine: _schedule.Machine
    cost: _schedule.Cost  # what progress rescales by the sources compiled (uniform: no model)


def build_sources(commands) -> list[str]:
    """The sources a prepared build compiles (basenames of build.ninja's commands)."""
    return [c.file.rsplit("/", 1)[-1] for c in commands]


def preview(
    plan, tools, sources: Sequence[str], cores: int, cached: int = 0, load: float | None = None
) -> Preview:
    """The estimate block; `cached`: the units the object cache serves besides `sources`; `load`:
    the load average (default: this machine's now), which widens the range above one per core."""
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    busy = load / max(1, cores)  # others' work shares the cores: the model assumes them free
    archs = tools.archs
    machine = _schedule.Machine(
        tools.jobs, tools.nvcc_threads or 1, cores, len(archs.targets) if archs else 1
    )
    costs = plan.flavour.costs(plan)
    cost = costs.seconds if costs else None
    seconds = _schedule.predict(sources, machine, cost) if cost else None
    n = machine.archs
    lines = [
        f"about to compile {len(sources)} source(s) x {n} architecture{'s' * (n != 1)}"
        f" (kernel set {plan.flavour.kernel_set_name(plan)})",
    ]
    if archs:
        chosen = archs.selection.source.startswith(("setting", "the visible"))
        lines.append(
            f"  architectures: {', '.join(archs.selection.archs)} from {archs.selection.source}"
            f" -> sm_{', sm_'.join(archs.targets)}"
            + ("" if chosen else " (set -C cuda-archs=... to build for your GPU only)")
        )
    lines.append(
        f"  jobs: {machine.jobs} compile job(s) x {machine.threads} nvcc thread(s) on "
        f"{cores} core(s)"
    )
    if seconds is None:
        dist = plan.flavour.names.dist
        lines.append(f"  estimate: none for {dist} (fa-shim has no cost model for its sources)")
    else:
        of = f"{cached} of {cached + len(sources)} units cached, " if cached else ""
        lines.append(
            f"  estimate: {_schedule.time_range(seconds, busy)} ({of}a per-source cost model "
            "calibrated on measured builds: docs/benchmarks.md)"
        )
    if busy > 1:
        lines.append(
            f"  note: this machine is busy (load average {load:.1f} on {cores} core(s)): "
            f"compiles may take {busy:.1f} x as long as on free cores, the range's top allows it"
        )
    if seconds is not None and seconds > SUGGEST_ABOVE_SECONDS and costs.faster:
        for alt, setting in costs.faster(tools, sources, machine):
            lines.append(f"  faster: {setting}: {_schedule.time_range(alt, busy)}")
    return Preview(seconds, tuple(lines), machine, cost or _schedule.uniform)


def check_mode(setting: str) -> str:
    mode = (setting or "auto").strip().lower()
    if mode not in MODES:
        raise FaShimError(
            f"setting progress is {setting!r}, expected one of {', '.join(MODES)}.",
            fix="use -C progress=auto (the terminal when the frontend hides the build's "
            "output), tty, stderr or none.",
        )
    return mode


def frontend_shows_output() -> bool:
    """Whether stderr is read live: a terminal, or a verbose frontend (-v, PIP_VERBOSE)."""
    if sys.stderr.isatty():
        return True
    if os.environ.get("PIP_VERBOSE", "0").strip().lower() not in ("", "0", "false", "no", "off"):
        return True
    try:  # the frontend's own command line
        raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        return False
    argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    return any(a == "--verbose" or re.fullmatch(r"-[a-zA-Z]*v[a-zA-Z]*", a) for a in argv)


class Display:
    """Where the lines go: stderr (plain), the log file (plain), the terminal (in place)."""

    def __init__(self, setting: str, log: Path | None) -> None:
        mode = check_mode(setting)
        self.stderr = mode != "none"
        self.tty: TextIO | None = None
        if mode == "tty" or (mode == "auto" and not frontend_shows_output()):
            try:
                self.tty = open("/dev/tty", "w", encoding="utf-8", errors="replace")  # noqa: SIM115
            except OSError:  # no controlling terminal (CI, a daemon, ssh without -t)
                if mode == "tty":
                    _log.warn("progress=tty, but this process has no terminal: progress on stderr")
        self._fresh_line = mode == "auto"  # the frontend's own line (pip's spinner) is open
        self._open = False  # an in-place line is on the terminal
        self.log = log.open("a", buffering=1) if log else None

    def line(self, text: str) -> None:
        """A line for everyone: stderr, the log, the terminal."""
        if self.stderr:
            _log.info(text)
        if self.log:
            self.log.write(f"fa-shim: {text}\n")
        if self.tty:
            self._tty_write(f"fa-shim: {text}\n", in_place=False)

    def status(self, text: str) -> None:
        """The terminal's in-place line (the plain lines are `line`'s business)."""
        if self.tty:
            # the trailing space is for pip's spinner, which backs up one column to draw
            self._tty_write(f"fa-shim: {text} ", in_place=True)

    def _tty_write(self, text: str, in_place: bool) -> None:
        assert self.tty is not None
        lead = "\n" if self._fresh_line else ""
        self._fresh_line = False
        if self._open:
            lead += "\r\x1b[K"
        try:
            self.tty.write(lead + text)
            self.tty.flush()
        except OSError:  # the terminal went away (ssh dropped): keep building
            self.tty = None
        self._open = in_place

    def close(self) -> None:
        if self.tty:
            with contextlib.suppress(OSError):
                if self._open:
                    self.tty.write("\n")
                self.tty.close()
            self.tty = None
        if self.log:
            self.log.close()
            self.log = None


def _left(seconds: float) -> str:
    return "<1 min left" if seconds < 60 else f"~{round(seconds / 60)} min left"


class Monitor:
    """Reads the launcher's records once a second; the heartbeat and progress lines."""

    def __init__(
        self,
        display: Display,
        sources: Sequence[str],
        stats_file: Path,
        machine: _schedule.Machine,
        cost: _schedule.Cost,
    ) -> None:
        self.display, self.sources, self.stats_file = display, list(sources), stats_file
        self.machine, self.cost = machine, cost
        self.interval = float(os.environ.get(INTERVAL_ENV) or 30.0)
        self.start = time.monotonic()
        self.last_line = self.start
        self.complete = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fa-shim-progress", daemon=True)

    def state(self) -> tuple[list[tuple[str, float]], list[tuple[str, float]], list[str]]:
        """(finished: name and seconds, running: name and seconds so far, pending names)."""
        ended = {(r["source"], r.get("started")) for r in _stats.tu_stats(self.stats_file)}
        finished = [(r["source"], float(r["seconds"])) for r in _stats.compiled(self.stats_file)]
        now = time.time()
        running = []
        for r in _stats.tu_stats(_stats.started_file(self.stats_file)):
            if (r["source"], r["started"]) not in ended:
                running.append((r["source"], max(0.0, now - r["started"])))
        taken = {n for n, _ in finished + running}
        pending = [s for s in self.sources if s not in taken]
        return finished, running, pending

    def text(self) -> tuple[str, bool]:
        """The current line, and whether every source is compiled."""
        finished, running, pending = self.state()
        minutes, seconds = divmod(int(time.monotonic() - self.start), 60)
        elapsed = f"{minutes}:{seconds:02d}"
        total = len(self.sources)
        done = len({n for n, _ in finished} & set(self.sources)) or len(finished)
        if not pending and not running and finished:
            return f"compiled {done}/{total} (100%) in {elapsed}", True
        left = _left(_schedule.remaining(pending, running, finished, self.machine, self.cost))
        names = [n for n, _ in sorted(running, key=lambda r: -r[1])]
        compiling = ", ".join(names[:3]) + (f" +{len(names) - 3} more" if len(names) > 3 else "")
        if not finished:  # the heartbeat: alive, and what it is working on
            if not running:
                return f"{elapsed} starting the compile (0/{total} done)", False
            return f"{elapsed} compiling {compiling} (0/{total} done, {left})", False
        percent = 100 * done // max(total, 1)
        text = f"compiled {done}/{total} ({percent}%) in {elapsed}, {left}"
        return text + (f"; compiling {compiling}" if running else ""), False

    def update(self, force: bool = False) -> bool:
        text, complete = self.text()
        now = time.monotonic()
        if force or complete or now - self.last_line >= self.interval:
            self.last_line = now
            self.display.line(text)
        else:
            self.display.status(text)
        self.complete = complete
        return complete

    def _loop(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                if self.update():
                    return
            except (OSError, ValueError, json.JSONDecodeError) as exc:  # a half-written record
                _log.debug(f"progress: {exc}")

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if exc_type is None and not self.complete:  # finished between two looks
            self.update(force=True)


@contextlib.contextmanager
def watching(plan, prep) -> Iterator[None]:
    """Around the compile of a prepared build: the estimate block, then progress."""
    display = Display(plan.settings.progress, prep.log)
    try:
        every = build_sources(prep.commands)
        sources = [s for s in every if s not in prep.cached]
        block = preview(
            plan, prep.tools, sources, _jobs.available_cores(), len(every) - len(sources)
        )
        for line in block.lines:
            display.line(line)
        with Monitor(display, sources, prep.stats_file, block.machine, block.cost):
            yield
    finally:
        display.close()
