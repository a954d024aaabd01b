#!/usr/bin/env python3
"""The full FlashAttention-3 set (every head dim, dtype and feature, sm_90a: v2.8.3 cut into the
files its aggregates include, or main-0251105a, which compiles the same 233 files) modelled on
one 16-core, 128 GiB machine and on N such machines through sccache-dist (issue 24). A full
build takes longer than a GPU machine is lent, so per-unit times and peaks measured on the H100
stand in for each kind of unit; the result is a model, never a measurement.

    python bench/fa3_full_model.py [--stats SLICE.jsonl ...] [--json OUT.json]
    python bench/fa3_full_model.py --aggregates \
        bench/results/2026-11-23-h100-fa3/full-compile-stats.jsonl

Units, as fa-shim compiles the set (flavours/fa3/_units): 220 forward per-head-dim units (bf16,
fp16, e4m3 x 5 head dims + the head-dim pairs x 10 feature variants), 10 backward units,
flash_api.cpp, the combine kernel, the scheduler: 233. A unit's time and peak, first found:
  1. the unit itself in a --stats file (a compile-stats.jsonl: bench/speed_device.sh fa3-slice);
  2. a measured unit of the same dtype and head dim(s), times its feature variant's factor;
  3. issue 24's H100 slice (16 units at once): forward units 181-234 s, 5.2-7.0 GiB; the
     central estimate takes the middle of the range, the high one its top and the largest
     variant factor. Variant factors: each variant's hdimall aggregate against the plain one
     (2026-11-23 full run; 1.0 where the run did not reach it).
Backward units: that run's records (235-275 s, 5.7-6.3 GiB, 16 at once); flash_api.cpp, the
scheduler and the combine unit: 60, 60 and 120 s at 2 GiB (assumed: minutes at most).
One machine: fa-shim's planner (schedule/_schedule's pools on 124 GiB, 16 cores, and its
order) given these figures, simulated, plus 90 s of serial steps (prepare, link, repack, verify;
assumed); and "as fa-shim plans it": the plan a build makes from its own cost and memory models
(flavours/fa3/_costs), run on these figures, with the most memory it can hold by them.
N machines: as bench/dist_model.py, longest first over N x 16 slots, each unit's client-side
part (0.11 of it) bounded by the 16 client cores, plus the same serial steps.
--aggregates: v2.8.3 as upstream cuts it (60 aggregates of 17-22 GiB), the 3.3 h of before.
--group N: the forward variants of each head dim and dtype compiled N to a unit, as fa-shim's
`-C fa3-group=N` cuts them (flavours/fa3/_groups, its order of setup.py's units): a group is
its time in a --stats file, else its members' mean time by the rules above times the ratio
measured groups of N had to theirs (central: the median; high: the largest), its peak the
heaviest member's plus the extra per variant they had (median; high: the largest).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fa_backend.flavours import _registry, _release_files  # noqa: E402
from fa_backend.flavours.fa3 import _costs, _groups, _releases, _units  # noqa: E402
from fa_backend.pipeline import _stats  # noqa: E402
from fa_backend.schedule import _schedule  # noqa: E402

GIB = 1024**3
FULL_RUN = ROOT / "bench/results/2026-11-23-h100-fa3/full-compile-stats.jsonl"
SLICE_SECONDS = (181.0, 234.0)  # issue 24: 16 units at once on the H100
SLICE_PEAK_GIB = 7.04  # the largest per-head-dim peak measured (5.2-7.04 GiB)
LIGHT = {"flash_api.cpp": 60.0, "flash_prepare_scheduler.cu": 60.0, "flash_fwd_combine.cu": 120.0}
SERIAL_SECONDS = 90.0
MEMORY = 124 * GIB  # what the 128 GiB machine had available
CORES = 16
LOCAL_FRACTION = 0.11  # bench/dist_model.py, measured on loopback
HDIMS = ("64", "96", "128", "192", "256")
PAIRS = {"bf16": ("64_256", "64_512", "192_128"), "fp16": ("64_256", "64_512", "192_128")}
PAIRS["e4m3"] = ("192_128",)
_UNIT = re.compile(r"flash_fwd_hdim(\d+(?:_\d+)?|all|diff)_(bf16|fp16|e4m3)(\w*)_sm90\.cu$")


def variants() -> list[str]:
    """hopper/setup.py's feature suffixes: paged, split, softcap, packgqa (no packgqa with paged
    or split)."""
    out = []
    for paged, split, softcap, packgqa in itertools.product(
        ("", "_paged"), ("", "_split"), ("", "_softcap"), ("", "_packgqa")
    ):
        if not (packgqa and (paged or split)):
            out.append(f"{paged}{split}{softcap}{packgqa}")
    return out


def full_set() -> list[str]:
    forward = [
        f"flash_fwd_hdim{h}_{dtype}{v}_sm90.cu"
        for dtype in ("bf16", "fp16", "e4m3")
        for h in (*HDIMS, *PAIRS[dtype])
        for v in variants()
    ]
    backward = [
        f"flash_bwd_hdim{h}_{dtype}_softcapall_sm90.cu" for h in HDIMS for dtype in ("bf16", "fp16")
    ]
    return [*forward, *backward, *LIGHT]


def records(paths: list[Path]) -> dict[str, dict]:
    found = {}
    for path in paths:
        for r in _stats.compiled(path):
            found[r["source"]] = r
    return found


def variant_factors() -> dict[str, float]:
    """Each feature variant's aggregate time against the plain aggregate's (bf16 and e4m3 of the
    2026-11-23 full run, averaged)."""
    done = records([FULL_RUN])
    factors: dict[str, list[float]] = {}
    for dtype in ("bf16", "e4m3"):
        plain = done.get(f"flash_fwd_hdimall_{dtype}_sm90.cu")
        for v in variants():
            unit = done.get(f"flash_fwd_hdimall_{dtype}{v}_sm90.cu")
            if plain and unit:
                factors.setdefault(v, []).append(unit["seconds"] / plain["seconds"])
    return {v: statistics.mean(f) for v, f in factors.items()}


def unit_figures(units: list[str], measured: dict[str, dict], high: bool) -> tuple[dict, dict]:
    """(seconds, peak bytes) of each unit by the rules of the module docstring."""
    factors = variant_factors()
    top = max(factors.values(), default=1.0)
    backward = records([FULL_RUN])
    by_kind: dict[tuple[str, str], list[dict]] = {}
    for name, r in measured.items():
        m = _UNIT.search(name)
        if m:
            by_kind.setdefault((m[1], m[2]), []).append({**r, "variant": m[3]})
    seconds, peaks = {}, {}
    for name in units:
        m = _UNIT.search(name)
        if name in measured:
            r = measured[name]
            seconds[name], peaks[name] = r["seconds"], r["peak_rss_mib"] * 2**20
        elif name.startswith("flash_bwd_"):
            r = backward[name]
            seconds[name], peaks[name] = r["seconds"], r["peak_rss_mib"] * 2**20
        elif name in LIGHT:
            seconds[name], peaks[name] = LIGHT[name], 2 * GIB
        elif m and (m[1], m[2]) in by_kind:
            same = by_kind[(m[1], m[2])]
            base = statistics.mean(r["seconds"] / factors.get(r["variant"], 1.0) for r in same)
            seconds[name] = base * (top if high else factors.get(m[3], 1.0))
            peaks[name] = max(r["peak_rss_mib"] for r in same) * 2**20
        else:
            each = SLICE_SECONDS[1] if high else statistics.mean(SLICE_SECONDS)
            seconds[name] = each * (max(top, 1.0) if high else factors.get(m[3], 1.0))
            peaks[name] = int(SLICE_PEAK_GIB * GIB)
    return seconds, peaks


def full_tailoring() -> _units.Fa3Tailoring:
    switches = ("BACKWARD", "SPLIT", "PAGEDKV", "APPENDKV", "LOCAL", "SOFTCAP", "PACKGQA",
                "FP16", "FP8", "VARLEN", "CLUSTER", *(f"HDIM{h}" for h in HDIMS), "SM80",
                "HDIMDIFF64", "HDIMDIFF192")  # fmt: skip
    return _units.tailoring(_registry.load_settings({}, environ={}), switches)


def fa_shim_order() -> list[str]:
    """setup.py's units in the order fa-shim lists them (a group's members follow it)."""
    return _units.planned(_releases.release("main-0251105a"), full_tailoring())


def grouped(size: int, seconds: dict, peaks: dict, stats: dict, high: bool) -> tuple[dict, dict]:
    """The set cut into groups of `size` (--group), from the single units' figures."""
    order = [u for u in fa_shim_order() if u in seconds]
    layout = _groups.layout(order, size)
    ratios, extras = [], []
    for name, members in layout.items():
        r = stats.get(name)
        if r and len(members) > 1:
            ratios.append(r["seconds"] / statistics.mean(seconds[m] for m in members))
            heaviest = max(peaks[m] for m in members)
            extras.append((r["peak_rss_mib"] * 2**20 - heaviest) / (len(members) - 1))
    if not ratios:
        raise SystemExit(f"no group of {size} in the --stats files: nothing to scale from")
    ratio = max(ratios) if high else statistics.median(ratios)
    extra = max(extras) if high else statistics.median(extras)
    print(f"groups of {size}: {len(ratios)} measured, x {statistics.median(ratios):.2f} median "
          f"(x {min(ratios):.2f}-{max(ratios):.2f}) their members' mean time, "
          f"+{statistics.median(extras) / 2**20:.0f} MiB median per other variant")  # fmt: skip
    out_s, out_p = {}, {}
    for name, members in layout.items():
        r = stats.get(name)
        if r:
            out_s[name], out_p[name] = r["seconds"], r["peak_rss_mib"] * 2**20
        elif len(members) == 1:
            out_s[name], out_p[name] = seconds[name], peaks[name]
        else:
            out_s[name] = ratio * statistics.mean(seconds[m] for m in members)
            out_p[name] = int(max(peaks[m] for m in members) + extra * (len(members) - 1))
    return out_s, out_p


def one_machine(seconds: dict, peaks: dict) -> dict:
    plan = _schedule.plan(peaks, CORES, MEMORY, seconds)
    order = _schedule.best_order(seconds, plan.jobs, plan.pool_of, plan.depths)
    compile_s = _schedule.simulate(order, seconds, plan.jobs, plan.pool_of, plan.depths)
    return {
        "plan": _schedule.describe(plan),
        "compile_s": round(compile_s),
        "wall_s": round(compile_s + SERIAL_SECONDS),
        "bound_s": round(max(max(seconds.values()), sum(seconds.values()) / CORES)),
    }


def _fa_shim_plan(units: dict, memory: int) -> tuple[_schedule.Pools, list[str]]:
    """The pools and order a build plans for these units (pipeline/_compile_plan.make)."""
    tailoring, setup_units = full_tailoring(), fa_shim_order()
    table = _release_files.load_units(_releases.release("main-0251105a").directory)
    cost = _costs.cost_model(tailoring)
    peak = _costs.memory_model(tailoring, table, setup_units)
    model_s, model_p = {n: cost(n) for n in units}, {n: peak(n) for n in units}
    plan = _schedule.plan(model_p, CORES, memory, model_s)
    return plan, _schedule.best_order(model_s, plan.jobs, plan.pool_of, plan.depths)


def as_planned(seconds: dict, peaks: dict) -> dict:
    """The plan a build makes (pipeline/_compile_plan: pools and order from the flavour's own
    cost and memory models, flavours/fa3/_costs and the line's units.json), run on these
    figures: what the default does, where one_machine plans knowing the measured figures."""
    plan, order = _fa_shim_plan(seconds, MEMORY)
    compile_s = _schedule.simulate(order, seconds, plan.jobs, plan.pool_of, plan.depths)
    return {
        "plan": _schedule.describe(plan),
        "compile_s": round(compile_s),
        "wall_s": round(compile_s + SERIAL_SECONDS),
        "most_memory_gib": round(_schedule.worst_case(peaks, plan) / GIB, 1),
    }


def projected(seconds: dict, tus: Path, started: Path, stopped_at: float, memory: int) -> dict:
    """A slice (bench/speed_device.sh fa3-slice) carried on to its end: what finished, as
    measured; a unit running at the stop, its figure less what it had run (1 s at least); the
    units not started, in the order fa-shim plans them, under the slice's own plan (the pools
    a build makes on `memory` from the flavour's models). `stopped_at`: seconds from the
    first unit's start."""
    plan, order = _fa_shim_plan(seconds, memory)
    done = {r["source"]: r for r in _stats.compiled(tus)}
    begun = [json.loads(line) for line in started.read_text().splitlines() if line.strip()]
    t0 = min(r["started"] for r in begun)
    start_of = {r["source"]: r["started"] - t0 for r in begun if r["source"] in seconds}
    running = [
        (max(stopped_at + 1, start + seconds[name]), name)
        for name, start in start_of.items()
        if name not in done
    ]
    pending = [n for n in order if n not in done and n not in start_of]
    counts = {"finished": len(done), "running_at_stop": len(running), "not_started": len(pending)}
    end = _schedule.simulate(
        pending, seconds, plan.jobs, plan.pool_of, plan.depths, running=running, now=stopped_at
    )
    last = max((r["started"] - t0 + r["seconds"] for r in done.values()), default=0.0)
    compile_s = max(end, last)
    return {
        "plan": _schedule.describe(plan),
        **counts,
        "stopped_at_s": round(stopped_at),
        "compile_s": round(compile_s),
        "wall_s": round(compile_s + SERIAL_SECONDS),
    }


def machines(seconds: dict, n: int) -> dict:
    slots = n * CORES
    makespan = _schedule.makespan(seconds.values(), slots)
    client = sum(seconds.values()) * LOCAL_FRACTION / CORES
    return {"machines": n, "compile_s": round(max(makespan, client)),
            "wall_s": round(max(makespan, client) + SERIAL_SECONDS)}  # fmt: skip


def aggregates(stats: Path) -> None:
    """v2.8.3 as upstream cuts it: the measured aggregates stand in for their kind."""
    done = _stats.compiled(stats)
    kinds: dict[str, list[dict]] = {"bwd": [], "hdimall": [], "hdimdiff": []}
    for r in done:
        m = re.match(r"flash_(bwd|fwd)_hdim(all|diff|\d+)", r["source"])
        if m:
            kinds["bwd" if m[1] == "bwd" else f"hdim{m[2]}"].append(r)
    worst = max((r["seconds"] for r in kinds["hdimall"]), default=0.0)
    seconds, peaks = {}, {}
    for kind, n in (("bwd", 10), ("hdimall", 30), ("hdimdiff", 30)):
        rows = kinds[kind]
        each = statistics.median(r["seconds"] for r in rows) if rows else worst
        peak = max((r["peak_rss_mib"] for r in rows), default=22 * 1024) * 2**20
        print(f"{kind:9} {n:3} units, {len(rows):2} measured, {each:5.0f} s, {peak / GIB:.0f} GiB")
        for i in range(n):
            seconds[f"{kind}_{i}"], peaks[f"{kind}_{i}"] = each, peak
    for name, s in LIGHT.items():
        seconds[name], peaks[name] = s, 2 * GIB
    five = _schedule.makespan(seconds.values(), 5)
    print(f"one figure per unit (22 GiB: 5 jobs): {five:.0f} s ({five / 3600:.1f} h)")
    pooled = one_machine(seconds, peaks)
    print(f"per-unit peaks ({pooled['plan']}): {pooled['compile_s'] / 3600:.1f} h compiling")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stats", type=Path, nargs="*", default=[])
    parser.add_argument("--aggregates", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--group", type=int, default=1)
    parser.add_argument("--project", type=Path, nargs=2, metavar=("TUS", "STARTED"))
    parser.add_argument("--stopped-at", type=float)
    parser.add_argument("--memory-gib", type=float, default=MEMORY / GIB)
    args = parser.parse_args()
    if args.aggregates:
        aggregates(args.aggregates)
        return 0
    units = full_set()
    found = records(args.stats)
    measured = {k: v for k, v in found.items() if k in units}
    result = {"units": len(units), "measured_units": len(measured), "estimates": {}}
    for label, high in (("central", False), ("high", True)):
        seconds, peaks = unit_figures(units, measured, high)
        if args.group > 1:
            seconds, peaks = grouped(args.group, seconds, peaks, found, high)
            result["group"] = args.group
            result["units"] = len(seconds)
            result["measured_groups"] = sum(n in found for n in seconds if "_group" in n)
        one = one_machine(seconds, peaks)
        default = as_planned(seconds, peaks)
        carried = None
        if args.project:
            memory = int(args.memory_gib * GIB)
            carried = projected(seconds, *args.project, args.stopped_at, memory)
        dist = [machines(seconds, n) for n in (1, 2, 4, 8)]
        result["estimates"][label] = {
            "sum_s": round(sum(seconds.values())),
            "largest_peak_gib": round(max(peaks.values()) / GIB, 2),
            "one_machine": one,
            "as_fa_shim_plans": default,
            "sccache_dist": dist,
            **({"slice_carried_on": carried} if carried else {}),
        }
        print(
            f"{label:7}: {len(seconds)} units ({len(measured)} single units measured), sum "
            f"{sum(seconds.values()):.0f} s, largest peak {max(peaks.values()) / GIB:.1f} GiB"
        )
        print(
            f"  one 16-core 128 GiB machine: {one['plan']}; compile {one['compile_s']} s "
            f"(bound {one['bound_s']} s), wall {one['wall_s']} s = {one['wall_s'] / 60:.0f} min"
        )
        print(
            f"  as fa-shim plans it (its own models): {default['plan']}; compile "
            f"{default['compile_s']} s, wall {default['wall_s']} s = {default['wall_s'] / 60:.0f} "
            f"min; at most {default['most_memory_gib']} GiB at once by these peaks"
        )
        if carried:
            print(
                f"  the slice carried on ({carried['plan']}): {carried['finished']} units "
                f"finished by {carried['stopped_at_s']} s, {carried['running_at_stop']} running, "
                f"{carried['not_started']} not started; compile {carried['compile_s']} s, "
                f"wall {carried['wall_s']} s = {carried['wall_s'] / 60:.0f} min"
            )
        for d in dist:
            print(f"  {d['machines']} x 16 through sccache-dist: wall {d['wall_s'] / 60:.1f} min")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
