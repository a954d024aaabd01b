"""FA2's tailored training set on a 16-core machine, by the cost model (flavours/fa2/_costs),
before and after issue 24: how many parts, which sources split, the modelled build.

    python bench/training_model.py [--cores 16]

The set: flash-attn 2.8.3, bf16, head dim 128, forward + backward, dropout/alibi/softcap/local
off (4 DISABLE switches), one architecture. Before: parts from the idle jobs (16 // 6 = 2), the
backward sources whole. After: the part count the model finds fastest, which with four switches
is 1 (a part then costs what its whole source does: measured 107 s whole against 171 s in 4
parts). The model's range is 0.7-1.3x; the measured builds are bench/speed_device.sh tailored
and batch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fa_backend.flavours.fa2 import _costs, _tu_parts
from fa_backend.schedule import _schedule

KERNELS = [
    f"flash_{p}_hdim128_bf16{c}_sm80.cu"
    for p in ("fwd", "fwd_split", "bwd")
    for c in ("", "_causal")
]
DISABLED = 4


def build(names: list[str], cores: int) -> tuple[float, float]:
    """(modelled build, its slowest unit) in seconds on `cores` jobs."""
    machine = _schedule.Machine(cores, 1, cores, 1)
    cost = _costs.model(DISABLED)
    return _schedule.predict(names, machine, cost), max(machine.scale(cost(n)) for n in names)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cores", type=int, default=16)
    args = parser.parse_args()
    rule = _tu_parts.choose(None, args.cores, KERNELS, True)
    before = [
        p
        for k in KERNELS
        for p in (_tu_parts.part_names(k, rule) if rule > 1 and "bwd" not in k else [k])
    ]
    parts = _costs.best_parts(None, args.cores, args.cores, KERNELS, True, DISABLED)
    after = _tu_parts.split_names(KERNELS, parts)
    for label, names, n in (("before", before, rule), ("after", after, parts)):
        seconds, slowest = build([*names, "flash_api.cpp"], args.cores)
        print(
            f"{label:6}: {n} part(s), {len(names) + 1} units, slowest unit {slowest:.0f} s, "
            f"build {seconds:.0f} s ({_schedule.time_range(seconds)})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
