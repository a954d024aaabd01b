"""On paper: a full build's wall time with sccache-dist on N build servers x C cores.

    python bench/dist_model.py RUN_DIR [--servers 1 2 4 8] [--cores 16] [--client-cores 16]
        [--local-fraction F]

From a full build's per-TU records on one machine (RUN_DIR/full-tus.jsonl, fa-shim's compiler
launcher) and its wall time (RUN_DIR/full.json, bench/measure.py):

- the steps outside the compile (prepare, link, repack, verify) stay on the client, serial:
  wall minus the compile phase (first TU start to last TU end), as measured;
- each TU's time splits into the part sccache-dist sends to a build server (cudafe++, cicc,
  ptxas, the host compile) and the part the client runs itself (`nvcc --dryrun`, the host
  preprocessor runs whose output is sent, fatbinary): the fraction F of the TU's time (measured
  on loopback, docs/benchmarks.md);
- the remote parts are list-scheduled longest first (LPT) onto N x C slots, each TU starting
  with its local part; the client's cores bound the local parts' sum (sum(F x t) / client cores);
- ninja runs as many jobs as there are slots (-C max-jobs=N x C), servers as fast as the GPU
  machine, transfers free (preprocessed sources of a few MB per TU), toolchains already on the
  servers (sccache packages them once per client and caches them).

The result is the compile phase max(LPT makespan, client bound) plus the serial steps.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from pathlib import Path

# the checkout's fa_backend: the same reading of the launcher's records as the build
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fa_backend.pipeline import _stats


def lpt(times: list[float], slots: int) -> float:
    """Makespan of longest-processing-time-first list scheduling onto `slots` machines."""
    free = [0.0] * slots
    for t in sorted(times, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + t)
    return max(free)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run", type=Path)
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--client-cores", type=int, default=16)
    parser.add_argument("--local-fraction", type=float, default=0.11)
    args = parser.parse_args()
    rows = _stats.compiled(args.run / "full-tus.jsonl")
    times = [float(r["seconds"]) for r in rows]
    span = _stats.compile_span(rows)
    if not span:
        raise SystemExit(f"{args.run}: the records have no start times (run3 and later have)")
    wall = json.loads((args.run / "full.json").read_text())["wall_s"]
    serial = wall - span
    local = args.local_fraction
    print(
        f"{len(times)} TUs, sum {sum(times):.0f} s, longest {max(times):.0f} s; measured on one "
        f"machine: wall {wall:.0f} s = compile phase {span:.0f} s + serial steps {serial:.0f} s; "
        f"client-local fraction of a TU {local:.2f}, client cores {args.client_cores}"
    )
    print()
    print("| build servers | slots | LPT makespan (s) | client bound (s) | wall (s) | speed-up |")
    print("|---|---|---|---|---|---|")
    for n in args.servers:
        slots = n * args.cores
        makespan = lpt(times, slots)
        client = sum(times) * local / args.client_cores
        model = max(makespan, client) + serial
        print(
            f"| {n} x {args.cores} | {slots} | {makespan:.0f} | {client:.0f} | {model:.0f} | "
            f"{wall / model:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
