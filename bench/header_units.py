#!/usr/bin/env python3
"""Each kernel source of a prepared FA2 set compiled with and without vendored
40-kernel-headers.patch, all at once: the patched tree's flash.h, and a copy of the kernel
directory holding upstream's flash.h (from the sdist). One line per compile as it ends: the
variant, the source, wall seconds, peak RSS (the compiler process tree's largest, by wait4),
the exit status; then the medians and the slowest unit of each variant.

    python -m fa_backend prepare --build-dir B -C ... > prepared.json
    python bench/header_units.py prepared.json flash_attn-2.8.3.tar.gz [--only NAME ...]
        [--timeout S] [--one-at-a-time [--repeat N]]

By default every compile starts at once (for a machine with cores >= 2 x sources: the training
set is 14 compiles). --one-at-a-time runs them one after the other, the variants alternating
(upstream, patched, upstream, ...), --repeat times: the A/B on a small machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

# the e2e symbol tests' helper: the build's compile command for another source and object
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from kernel_symbols import command_for


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("prepared", type=Path)
    parser.add_argument("sdist", type=Path)
    parser.add_argument("--only", nargs="+", help="these kernel sources' names")
    parser.add_argument("--timeout", type=float, default=300, help="for all compiles together")
    parser.add_argument("--one-at-a-time", action="store_true")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    prepared = json.loads(args.prepared.read_text())
    top = args.sdist.name.removesuffix(".tar.gz")
    patched = Path(prepared["source"]) / "csrc" / "flash_attn" / "src"
    upstream = args.prepared.parent / "upstream-src"
    shutil.rmtree(upstream, ignore_errors=True)
    shutil.copytree(patched, upstream)
    with tarfile.open(args.sdist) as tar:
        flash_h = tar.extractfile(f"{top}/csrc/flash_attn/src/flash.h").read()
    (upstream / "flash.h").write_bytes(flash_h)
    objects = args.prepared.parent / "objects"
    objects.mkdir(exist_ok=True)
    compiles = []  # (variant, source, command), the variants alternating
    for entry in prepared["compile_commands"] * args.repeat:
        name = Path(entry["file"]).name
        if name.endswith(".cu") and name in (args.only or [name]):
            for variant, tree in (("upstream", upstream), ("patched", patched)):
                obj = objects / f"{variant}-{name}.o"
                compiles.append((variant, name, command_for(entry["args"], tree / name, obj)))
    results = {"upstream": [], "patched": []}
    deadline = time.monotonic() + args.timeout
    batches = [[c] for c in compiles] if args.one_at_a_time else [compiles]
    for batch in batches:
        if not run(batch, deadline, results):
            break
    for variant, walls in results.items():
        if walls:
            median, slowest = statistics.median(w for w, _ in walls), max(walls)
            print(f"{variant}: {len(walls)} units, median {median:.1f} s, "
                  f"slowest {slowest[0]:.1f} s ({slowest[1]})")  # fmt: skip
    return 0


def run(batch: list, deadline: float, results: dict) -> bool:
    """Start the batch's compiles at once and wait for them; False when the deadline stopped it."""
    jobs = {}
    for variant, name, command in batch:
        proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        jobs[proc.pid] = (variant, name, time.monotonic(), proc)
    while jobs:
        if time.monotonic() > deadline:
            for variant, name, start, proc in jobs.values():
                os.killpg(proc.pid, signal.SIGKILL)
                print(f"{variant} {name} >{time.monotonic() - start:.1f} s (stopped)", flush=True)
            return False
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.2)
            continue
        variant, name, start, _ = jobs.pop(pid)
        wall = time.monotonic() - start
        results[variant].append((wall, name))
        print(f"{variant} {name} {wall:.1f} s {usage.ru_maxrss / 2**20:.2f} GiB "
              f"exit {os.waitstatus_to_exitcode(status)}", flush=True)  # fmt: skip
    return True


if __name__ == "__main__":
    sys.exit(main())
