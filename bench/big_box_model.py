#!/usr/bin/env python3
"""Issue 45: the full FA2 and FlashAttention-3 sets on 16, 32 and 64 cores, predicted by the time
model (schedule/_schedule: ninja's start order replayed), before and after the plan changes.
A model, never a measurement: bench/big_box_device.sh times the real builds.

    python bench/big_box_model.py        # under a minute on the 2-core box (the order searches)

FA2 (2.8.3, sm_90, one arch, one job per core): each unit's one-core time is run3's record
(bench/results/2026-11-22-h100/run3, 16 jobs on 16 busy cores), a part's the cost model's share
of its whole source's record; the order is the one a build plans (the search over the cost
model's times). "whole": every source as one unit (fa-shim before); "as planned": the parts and
sources `_costs.best_split` chooses. Plus 30 s of serial steps (_schedule.OVERHEAD_SECONDS).

FA3 (main-0251105a's full set, sm_90a): bench/fa3_full_model.py's central figures (the leases'
slices; groups of five as measured there, a group of two as the flavour's GROUP_SHARE scales
it), each group size planned as a build plans it (pools and order from the flavour's own models)
on the machine's cores and memory; "picked": the size the flavour's sizing takes there.
Memory: 124 GiB on 16 cores (the H100 box), 248 GiB on 32 (assumed), 490 GiB on 64 (the
64-core box's 503 GiB less what its system holds: assumed).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
import fa3_full_model as fa3  # noqa: E402

from fa_backend.flavours.fa2 import _costs, _tu_parts  # noqa: E402
from fa_backend.flavours.fa3 import _costs as fa3_costs  # noqa: E402
from fa_backend.flavours.fa3 import _groups  # noqa: E402
from fa_backend.pipeline import _stats  # noqa: E402
from fa_backend.schedule import _schedule  # noqa: E402

GIB = 1024**3
RUN3 = ROOT / "bench/results/2026-11-22-h100/run3/full-tus.jsonl"
MACHINES = {16: 124 * GIB, 32: 248 * GIB, 64: 490 * GIB}
G = ROOT / "bench/results"
SLICES = [
    G / "2026-11-24-h100-lease-b/fa3-slice-tus.jsonl",
    G / "2026-11-25-h100-lease-f/fa3-slice-tus.jsonl",
    G / "2026-11-26-h200-lease-j/fa3-slice-tus.jsonl",
    G / "2026-11-26-h200-lease-k/fa3-slice-tus.jsonl",
]


def fa2_end(kernels: list[str], parts: int, whole: int, cores: int) -> tuple[int, float]:
    recorded = {r["source"]: float(r["seconds"]) for r in _stats.compiled(RUN3)}
    cost = _costs.model(0)
    units = [
        *_tu_parts.split_names(kernels, parts, _costs.cut_sources(kernels, whole)),
        "flash_api.cpp",
    ]
    times = {
        n: recorded[_tu_parts.source_of(n)] * cost(n) / cost(_tu_parts.source_of(n)) for n in units
    }
    order = _schedule.best_order({n: cost(n) for n in units}, cores)
    return len(units), _schedule.OVERHEAD_SECONDS + _schedule.simulate(order, times, cores)


def fa2() -> None:
    kernels = sorted(
        f"flash_{p}_hdim{h}_{d}{c}_sm80.cu"
        for p in ("fwd", "fwd_split", "bwd")
        for h in (32, 64, 96, 128, 192, 256)
        for d in ("fp16", "bf16")
        for c in ("", "_causal")
    )
    print("| FA2 full, cores = jobs | whole: units, s | as planned | units, s | change |")
    print("|---|---|---|---|---|")
    for cores in MACHINES:
        n0, before = fa2_end(kernels, 1, 0, cores)
        parts, whole = _costs.best_split(None, cores, cores, kernels, True, 0)
        n1, after = fa2_end(kernels, parts, whole, cores)
        plan = f"{72 - whole} sources in {parts} parts" if parts > 1 else "every source whole"
        change = f"{after / before - 1:+.1%}"
        print(f"| {cores} | {n0}, {before:.0f} | {plan} | {n1}, {after:.0f} | {change} |")


def fa3_figures() -> tuple[dict, dict, dict]:
    units = fa3.full_set()
    found = fa3.records(SLICES)
    seconds, peaks = fa3.unit_figures(units, {k: v for k, v in found.items() if k in units}, False)
    return seconds, peaks, found


def fa3_grouped(size: int, seconds: dict, peaks: dict, found: dict) -> tuple[dict, dict]:
    if size == 1:
        return seconds, peaks
    if size == 5:
        return fa3.grouped(5, seconds, peaks, found, False)
    order = [u for u in fa3.fa_shim_order() if u in seconds]
    out_s, out_p = {}, {}
    for name, members in _groups.layout(order, size).items():
        share = 1 + fa3_costs.GROUP_SHARE * (len(members) - 1)
        out_s[name] = share * statistics.mean(seconds[m] for m in members)
        extra = fa3_costs.GROUP_PEAK_PER_VARIANT * (len(members) - 1)
        out_p[name] = int(max(peaks[m] for m in members) + extra)
    return out_s, out_p


def fa3_picked(cores: int, memory: int) -> int:
    tailoring, units = fa3.full_tailoring(), fa3.fa_shim_order()
    table = fa3._release_files.load_units(fa3._releases.release("main-0251105a").directory)
    peak = fa3_costs.memory_model(tailoring, table, units)
    return _groups.best_size(units, fa3_costs.cost_model(tailoring), peak, cores, memory)


def fa3_table() -> None:
    seconds, peaks, found = fa3_figures()
    print("\n| FA3 full, cores (memory) | group size | units | plan | compile s | wall min |")
    print("|---|---|---|---|---|---|")
    for cores, memory in MACHINES.items():
        fa3.CORES = cores
        picked = fa3_picked(cores, memory)
        for size in _groups.SIZES:
            s, _ = fa3_grouped(size, seconds, peaks, found)
            plan, order = fa3._fa_shim_plan(s, memory)
            end = _schedule.simulate(order, s, plan.jobs, plan.pool_of, plan.depths)
            mark = " (picked)" if size == picked else ""
            wall = (end + fa3.SERIAL_SECONDS) / 60
            row = [f"{cores} ({memory // GIB} GiB)", f"{size}{mark}", len(s)]
            row += [_schedule.describe(plan), f"{end:.0f}", f"{wall:.0f}"]
            print("| " + " | ".join(map(str, row)) + " |")


if __name__ == "__main__":
    fa2()
    fa3_table()
