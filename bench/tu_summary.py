"""Per-TU compile times of the build benchmarks, against the bound a build cannot beat.

    python bench/tu_summary.py RESULTS_DIR [--cores N]

For each NAME-tus.jsonl (fa-shim's compiler launcher: one line per TU) and stock-ninja-log.txt
(ninja's own log of upstream's stock build): the TUs, the sum of their times, the longest one,
sum/cores, and with NAME.json (bench/measure.py) the wall time over max(longest, sum/cores).
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def fa_shim_tus(path: Path) -> list[tuple[str, float]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    # the launcher also sees nvcc's own probes (no source, ~0 s): not translation units
    return [
        (r["source"].rsplit("/", 1)[-1], float(r["seconds"]))
        for r in rows
        if r.get("source") not in (None, "?") and r.get("exit") == 0
    ]


def ninja_tus(path: Path) -> list[tuple[str, float]]:
    """ninja's .ninja_log v5: start ms, end ms, mtime, output, hash (the last entry per output)."""
    last = {}
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _, output, *_ = line.split("\t")
        if output.endswith(".o"):
            last[output] = (int(end) - int(start)) / 1000
    return [(o.rsplit("/", 1)[-1], s) for o, s in last.items()]


def row(name: str, tus: list[tuple[str, float]], cores: int, wall: float | None) -> str:
    total = sum(s for _, s in tus)
    longest_name, longest = max(tus, key=lambda t: t[1])
    bound = max(longest, total / cores)
    ratio = f"{wall / bound:.2f}" if wall else "—"
    return (
        f"| {name} | {len(tus)} | {total:.0f} | {longest:.0f} ({longest_name}) | "
        f"{total / cores:.0f} | {wall if wall else '—'} | {ratio} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("results", type=Path)
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    args = parser.parse_args()
    print(
        "| build | TUs | sum of TU times (s) | longest TU (s) | sum/cores (s) | wall (s) | "
        "wall / max(longest, sum/cores) |"
    )
    print("|---|---|---|---|---|---|---|")
    sources = sorted(args.results.glob("*-tus.jsonl"))
    for path in sources:
        name = path.name[: -len("-tus.jsonl")]
        tus = fa_shim_tus(path)
        result = args.results / f"{name}.json"
        wall = json.loads(result.read_text())["wall_s"] if result.is_file() else None
        if tus:
            print(row(name, tus, args.cores, wall))
    stock = args.results / "stock-ninja-log.txt"
    if stock.is_file():
        result = args.results / "stock.json"
        wall = json.loads(result.read_text())["wall_s"] if result.is_file() else None
        print(row("stock (ninja log)", ninja_tus(stock), args.cores, wall))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
