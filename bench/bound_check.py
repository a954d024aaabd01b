"""A build's compile phase against the bound no schedule can beat, from its launcher records.

    python bench/bound_check.py STATS.jsonl [--cores 16] [--jobs N] [--fa3]
                                [--wall SECONDS | --wall-json RUN.json]

STATS.jsonl is the compile-stats.jsonl fa-shim's compiler launcher wrote (kept by
bench/build_bench.sh and bench/speed_device.sh as NAME-tus.jsonl). Prints the units, the sum of
their times, the longest, sum/cores, the bound max(longest, sum/cores), the compile phase (first
unit's start to the last one's end) and its ratio to the bound (issue 24's target for FA2's full
one-arch build: <= 1.05), the wall time's ratio where given, and the same units replayed on the
build's jobs (default: the cores): longest first, in the order they started (ninja's, as the build
planned it), and for FA2 through the order fa-shim plans now (schedule/_schedule.best_order over
FA2's cost model, run on these times): what the current schedule would make of this run's units.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fa_backend.flavours.fa2 import _costs
from fa_backend.pipeline import _stats
from fa_backend.schedule import _schedule


def report(stats: Path, cores: int, wall: float | None, jobs: int = 0, fa2: bool = True) -> dict:
    rows = _stats.compiled(stats)
    if not rows:
        raise SystemExit(f"{stats}: no compiled unit recorded")
    times = {r["source"]: float(r["seconds"]) for r in rows}
    total, longest = sum(times.values()), max(times.values())
    bound = max(longest, total / cores)
    span = _stats.compile_span(rows)
    jobs = jobs or cores
    longest_first = sorted(times, key=lambda n: -times[n])
    started = [r["source"] for r in sorted(rows, key=lambda r: r["started"])]
    planned = None
    if fa2:
        model = {name: _costs.source_seconds(name) for name in times}
        planned = _schedule.simulate(_schedule.best_order(model, jobs), times, jobs) / bound
    return {
        "units": len(times),
        "sum_s": round(total, 1),
        "longest_s": round(longest, 1),
        "longest_unit": max(times, key=times.__getitem__),
        "sum_over_cores_s": round(total / cores, 1),
        "bound_s": round(bound, 1),
        "compile_phase_s": round(span, 1) if span else None,
        "compile_phase_ratio": round(span / bound, 3) if span else None,
        "wall_s": wall,
        "wall_ratio": round(wall / bound, 3) if wall else None,
        "replay_longest_first_ratio": round(
            _schedule.simulate(longest_first, times, jobs) / bound, 3
        ),
        "replay_started_order_ratio": round(_schedule.simulate(started, times, jobs) / bound, 3),
        "replay_planned_order_ratio": round(planned, 3) if planned else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("stats", type=Path)
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=0, help="the build's jobs (default: cores)")
    parser.add_argument("--fa3", action="store_true", help="FlashAttention-3 units: no FA2 model")
    parser.add_argument("--wall", type=float, help="the build's wall time (s)")
    parser.add_argument("--wall-json", type=Path, help="bench/measure.py's JSON (wall_s)")
    parser.add_argument("--json", action="store_true", help="print the JSON only")
    args = parser.parse_args()
    wall = args.wall
    if args.wall_json:
        wall = json.loads(args.wall_json.read_text())["wall_s"]
    result = report(args.stats, args.cores, wall, args.jobs, not args.fa3)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(
        f"{result['units']} units, sum {result['sum_s']:.0f} s, longest "
        f"{result['longest_s']:.0f} s ({result['longest_unit']}), sum/{args.cores} "
        f"{result['sum_over_cores_s']:.0f} s: "
        f"bound {result['bound_s']:.0f} s"
    )
    if result["compile_phase_s"]:
        print(
            f"compile phase {result['compile_phase_s']:.0f} s = "
            f"{result['compile_phase_ratio']:.3f} x bound (target <= 1.05)"
        )
    if wall:
        print(f"wall {wall:.0f} s = {result['wall_ratio']:.3f} x bound")
    planned = result["replay_planned_order_ratio"]
    print(
        f"these units replayed on {args.jobs or args.cores} jobs: longest first "
        f"{result['replay_longest_first_ratio']:.3f} x bound, in the order they started "
        f"{result['replay_started_order_ratio']:.3f} x bound"
        + (f", fa-shim's planned order {planned:.3f} x bound" if planned else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
