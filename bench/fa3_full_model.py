#!/usr/bin/env python3
"""The full FlashAttention-3 build (every head dim, dtype and feature, sm_90a: 73 units) modelled
from the units a partial run compiled (bench/fa3_device.sh tests/poll keep the launcher's
compile-stats.jsonl). A full build takes hours on one machine, longer than a lent GPU machine is
held, so the measured units stand in for their kind:

    python bench/fa3_full_model.py docs/gpu-runs/2026-11-23-h100-fa3/full-compile-stats.jsonl

Kinds: backward units (10), forward `hdimall` units (30: bf16, fp16, e4m3 x 10 feature variants)
and forward `hdimdiff` units (30, the same variants for unequal q/v head dims). A kind without a
finished unit takes the slowest measured forward time (an upper bound). Memory decides the jobs:
each forward unit peaks at 17-22 GiB, so `jobs` (default 5: 124 GiB / 22 GiB) run at once.
Prints the per-kind times and the makespan of a longest-first schedule."""

from __future__ import annotations

import argparse
import heapq
import json
import re
import statistics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("stats")
    ap.add_argument("--jobs", type=int, default=5)
    args = ap.parse_args()
    with open(args.stats) as f:
        done = [json.loads(line) for line in f if line.strip()]
    done = [r for r in done if r["source"] != "?" and r["exit"] == 0]
    kinds: dict[str, list[float]] = {"bwd": [], "fwd_hdimall": [], "fwd_hdimdiff": []}
    for r in done:
        m = re.match(r"flash_(bwd|fwd)_hdim(all|diff|\d+)", r["source"])
        if m:
            kind = "bwd" if m.group(1) == "bwd" else f"fwd_hdim{m.group(2)}"
            kinds[kind].append(float(r["seconds"]))
    counts = {"bwd": 10, "fwd_hdimall": 30, "fwd_hdimdiff": 30}
    worst_fwd = max(kinds["fwd_hdimall"] or [0.0])
    units = []
    for kind, n in counts.items():
        measured = kinds[kind]
        each = statistics.median(measured) if measured else worst_fwd
        peak = max(
            (r.get("peak_rss_mib", 0) for r in done if kind.split("_")[0] in r["source"]), default=0
        )
        print(
            f"{kind:13} {n:3} units, {len(measured):2} measured, {each:6.0f} s each"
            + ("" if measured else " (not measured: the slowest forward time)")
            + f", peak {peak / 1024:.0f} GiB"
        )
        units += [each] * n
    units += [60.0, 60.0, 120.0]  # flash_api.cpp, the scheduler and the combine unit: minutes
    finish = [0.0] * args.jobs
    heapq.heapify(finish)
    for seconds in sorted(units, reverse=True):
        heapq.heappush(finish, heapq.heappop(finish) + seconds)
    total = max(finish)
    print(f"model: {len(units)} units on {args.jobs} jobs: {total:.0f} s ({total / 3600:.1f} h)")


if __name__ == "__main__":
    main()
