"""What a stock default-arch build would take if it had the memory: an estimate, not a measurement.

    python bench/stock_default_estimate.py DEFAULT_NINJA_LOG ONE_ARCH_NINJA_LOG --jobs N

Upstream's default-arch build does not finish on the 16-core, 128 GiB GPU machine (the OOM killer
stops it; docs/benchmarks.md). Its ninja log still holds the objects it finished. Each of those,
divided by the same object's time in the finished one-arch stock build, gives how much the default
archs cost per object; that ratio times the one-arch build's sum of object times, over the jobs
upstream chose, is a lower bound for the default build's compile phase (perfect packing, no link).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tu_summary import ninja_tus


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("default_log", type=Path)
    parser.add_argument("one_arch_log", type=Path)
    parser.add_argument("--jobs", type=int, required=True, help="the jobs upstream ran")
    args = parser.parse_args()
    default = dict(ninja_tus(args.default_log)[0])
    one_arch = dict(ninja_tus(args.one_arch_log)[0])
    common = sorted(set(default) & set(one_arch))
    if not common:
        raise SystemExit("the two logs share no finished object")
    ratio = sum(default[o] for o in common) / sum(one_arch[o] for o in common)
    total = ratio * sum(one_arch.values())
    print(f"objects finished in both builds: {len(common)} of {len(one_arch)}")
    for o in common:
        print(f"  {o}: {default[o]:.0f} s default archs, {one_arch[o]:.0f} s one arch")
    print(f"default/one-arch time per object: {ratio:.2f}")
    print(f"estimated sum of object times, default archs: {total:.0f} s")
    phase = total / args.jobs
    print(f"estimated compile phase at {args.jobs} jobs, perfectly packed: {phase:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
