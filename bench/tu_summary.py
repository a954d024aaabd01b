"""Per-TU compile times of the build benchmarks, against the bound a build cannot beat.

    python bench/tu_summary.py RESULTS_DIR [--cores N]

For each NAME-tus.jsonl (fa-shim's compiler launcher: one line per TU) and stock-ninja-log.txt
(ninja's own log of upstream's stock build): the TUs, the sum of their times, the longest one,
sum/cores, the compile phase (first TU start to last TU end, where recorded), and with NAME.json
(bench/measure.py) the wall time over max(longest, sum/cores).
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# the checkout's fa_backend: the same reading of the launcher's records as the build
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fa_backend.pipeline import _stats


def fa_shim_tus(path: Path) -> tuple[list[tuple[str, float]], float | None]:
    """(name, seconds) per TU, and the compile phase's span where the launcher recorded starts."""
    # the build's own reading of the launcher's records (nvcc's probes name no source)
    rows = _stats.compiled(path)
    tus = [(r["source"].rsplit("/", 1)[-1], float(r["seconds"])) for r in rows]
    return tus, _stats.compile_span(rows) or None


def ninja_tus(path: Path) -> tuple[list[tuple[str, float]], float | None]:
    """ninja's .ninja_log: start ms, end ms, mtime, output, hash (the last entry per output)."""
    last = {}
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _, output, *_ = line.split("\t")
        if output.endswith(".o"):
            last[output] = (int(start), int(end))
    if not last:
        return [], None
    tus = [(o.rsplit("/", 1)[-1], (e - s) / 1000) for o, (s, e) in last.items()]
    span = (max(e for _, e in last.values()) - min(s for s, _ in last.values())) / 1000
    return tus, span


def row(name, tus, span, cores: int, wall: float | None) -> str:
    total = sum(s for _, s in tus)
    longest_name, longest = max(tus, key=lambda t: t[1])
    bound = max(longest, total / cores)
    ratio = f"{wall / bound:.2f}" if wall else "—"
    compiling = f"{span:.0f} ({span / bound:.2f})" if span else "—"
    return (
        f"| {name} | {len(tus)} | {total:.0f} | {longest:.0f} ({longest_name}) | "
        f"{total / cores:.0f} | {compiling} | {wall if wall else '—'} | {ratio} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("results", type=Path)
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    args = parser.parse_args()
    print(
        "| build | TUs | sum of TU times (s) | longest TU (s) | sum/cores (s) | "
        "compile phase (s) (/ bound) | wall (s) | wall / max(longest, sum/cores) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    sources = sorted(args.results.glob("*-tus.jsonl"))
    for path in sources:
        name = path.name[: -len("-tus.jsonl")]
        tus, span = fa_shim_tus(path)
        result = args.results / f"{name}.json"
        wall = json.loads(result.read_text())["wall_s"] if result.is_file() else None
        if tus:
            print(row(name, tus, span, args.cores, wall))
    stock = args.results / "stock-ninja-log.txt"
    if stock.is_file():
        result = args.results / "stock.json"
        wall = json.loads(result.read_text())["wall_s"] if result.is_file() else None
        tus, span = ninja_tus(stock)
        print(row("stock (ninja log)", tus, span, args.cores, wall))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
