"""Run a command and measure it: wall time and the peak total RSS of its whole process tree.

    python bench/measure.py RESULT.json -- COMMAND [ARGS...]

Memory sampled once a second with psutil (a build's peak is many compilers at once, which the
per-process maxima of getrusage cannot show); the wall time is taken when the command exits,
not at the next sample. Used by the build benchmarks in docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time

import psutil


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def main() -> int:
    result_path, sep, *command = sys.argv[1:]
    assert sep == "--", __doc__
    start = time.monotonic()
    child = subprocess.Popen(command)
    ps = psutil.Process(child.pid)
    peak = 0
    while child.poll() is None:
        with contextlib.suppress(psutil.NoSuchProcess):
            peak = max(peak, tree_rss(ps))
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=1.0)  # returns at the exit: the wall time is not a sample's
    wall = time.monotonic() - start
    result = {
        "command": command,
        "exit": child.returncode,
        "wall_s": round(wall, 1),
        "peak_rss_gib": round(peak / 2**30, 2),
    }
    with open(result_path, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result), file=sys.stderr)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
