"""The build-time estimate (fa_backend/flavours/fa2/_costs.py) against the recorded builds.

    python bench/estimate_check.py [--table]

Derives the model's per-kernel table from the H100 run3 records (what _costs.KERNEL_SECONDS
must equal) and prints, for every recorded fa-shim build, the model's estimate beside the
measured wall time (a markdown table for docs/benchmarks.md). The sources of each build are its
launcher records where they were kept, else the set it compiled.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fa_backend.flavours.fa2 import _costs
from fa_backend.pipeline import _stats
from fa_backend.schedule import _schedule

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "bench" / "results" / "2026-11-22-h100"
CALIBRATION = H100 / "run3" / "full-tus.jsonl"
TAILORED = [
    f"flash_fwd{s}_hdim128_bf16{c}_sm80.cu" for s in ("", "_split") for c in ("", "_causal")
]


def kernel_table(records: Path = CALIBRATION) -> dict[tuple[str, int, bool], int]:
    """(kind, hdim, causal) -> mean seconds over fp16/bf16, rounded."""
    times = defaultdict(list)
    for r in _stats.compiled(records):
        m = re.match(
            r"flash_(fwd_split|fwd|bwd)_hdim(\d+)_(?:fp16|bf16)(_causal)?_sm80", r["source"]
        )
        if m:
            times[(m[1], int(m[2]), bool(m[3]))].append(r["seconds"])
    return {k: round(sum(v) / len(v)) for k, v in sorted(times.items())}


def _names(tus: Path) -> list[str]:
    return [r["source"] for r in _stats.compiled(tus)]


def _wall(result: Path) -> float:
    return json.loads(result.read_text())["wall_s"]


# (build, machine, sources, Machine, disabled switches, measured wall s)
def recorded() -> list[tuple[str, str, list[str], _schedule.Machine, int, float]]:
    h100 = _schedule.Machine(jobs=16, threads=1, cores=16, archs=1)
    rows = [
        (
            "full, sm_90",
            "H100 16 cores, run3",
            _names(H100 / "run3/full-tus.jsonl"),
            h100,
            0,
            _wall(H100 / "run3/full.json"),
        )
    ]
    for run in ("run3", "run5", "run6"):
        for name, disabled in (("tailored", 0), ("tailored-disable", 5)):
            rows.append(
                (
                    f"{name}, 4 parts",
                    f"H100 16 cores, {run}",
                    _names(H100 / run / f"{name}-tus.jsonl"),
                    h100,
                    disabled,
                    _wall(H100 / run / f"{name}.json"),
                )
            )
    rows.append(
        (
            "tailored-disable, unsplit (4 jobs)",
            "H100 16 cores, run1",
            _names(H100 / "run1/tailored-disable-unsplit-tus.jsonl"),
            _schedule.Machine(4, 1, 16, 1),
            5,
            _wall(H100 / "run1/tailored-disable-unsplit.json"),
        )
    )
    h200 = ROOT / "bench/results/2026-11-22-h200-tailored"
    for name, disabled in (("tailored", 0), ("tailored-disable", 5)):
        rows.append(
            (
                f"{name}, unsplit",
                "H200 16 cores",
                [*TAILORED, "flash_api.cpp"],
                _schedule.Machine(5, 1, 16, 1),
                disabled,
                _wall(h200 / f"{name}.json"),
            )
        )
    # the training set (bf16, hdim 128, fwd+bwd, 4 switches) in 4 parts, in 2 and whole
    lease_b = ROOT / "bench/results/2026-11-24-h100-lease-b"
    lease_c = ROOT / "bench/results/2026-11-25-h100-lease-c"
    for label, run, lease, name, jobs in (
        ("4 parts", lease_b, "lease b", "fa2-training", 16),
        ("2 parts", lease_c, "lease c", "fa2-parts2", 16),
        ("whole", lease_c, "lease c", "fa2-whole", 7),
    ):
        rows.append(
            (
                f"training, {label}",
                f"H100 16 cores, {lease}",
                _names(run / f"{name}-tus.jsonl"),
                _schedule.Machine(jobs, 1, 16, 1),
                4,
                _wall(run / f"{name}.json"),
            )
        )
    cpu = ROOT / "bench/results/2026-11-22-ccache/ccache-cold.json"
    rows.append(
        (
            "tailored, sm_80, ccache cold",
            "CPU box 2 cores",
            [*TAILORED, "flash_api.cpp"],
            _schedule.Machine(2, 1, 2, 1),
            0,
            _wall(cpu),
        )
    )
    return rows  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", action="store_true", help="print the derived kernel table")
    args = parser.parse_args()
    if args.table:
        for key, seconds in kernel_table().items():
            print(key, seconds)
        return 0
    print("| build | machine | TUs | estimate (range) | measured | measured / estimate |")
    print("|---|---|---|---|---|---|")
    for build, machine, sources, m, disabled, wall in recorded():
        seconds = _schedule.predict(sources, m, _costs.model(disabled))
        print(
            f"| {build} | {machine} | {len(sources)} | {seconds:.0f} s "
            f"({_schedule.time_range(seconds)}) | {wall:.1f} s | {wall / seconds:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
