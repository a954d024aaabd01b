"""Refresh a release's table of per-unit peak memory and time from real builds' records.

    python bench/unit_table.py RELEASE_DIR STATS.jsonl [STATS.jsonl ...] [--check]

RELEASE_DIR is the release's registry directory (vendored_patches/2.8.3 for FA2,
vendored_patches/fa3/2.8.3 for FA3); each STATS.jsonl is a compile-stats.jsonl the compiler
launcher wrote in a build (bench/build_bench.sh and bench/speed_device.sh keep them as
*-tus.jsonl). Every unit that compiled takes the peak and time of the last file that has it;
the others keep theirs. The records must come from builds of one architecture per nvcc job
(the table's unit). --check: exit 1 if the table is not what these records make (a test keeps
FA2's table equal to the recorded runs it was made from).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fa_backend.flavours import _release_files  # noqa: E402
from fa_backend.pipeline import _stats  # noqa: E402

ABOUT = (
    "Each compile unit's peak memory (MiB, the largest compiler process) and time (s) for one "
    "architecture, from fa-shim's compiler launcher in real builds; refreshed by "
    "bench/unit_table.py (issue 24)."
)


def merge(table: Mapping | None, records: Iterable[Mapping], origin: str) -> dict:
    """The table with a run's launcher records folded in: each unit that compiled (exit 0) gets
    this run's peak and time; units the run did not compile keep theirs. A unit compiled
    twice in the records (a retried build) keeps its largest peak."""
    units = {k: dict(v) for k, v in ((table or {}).get("units") or {}).items()}
    fresh: dict[str, dict] = {}
    for r in records:
        if r.get("source", "?") == "?" or r.get("exit") != 0:
            continue
        name = str(r["source"]).rsplit("/", 1)[-1]
        seen = fresh.get(name)
        if seen is None or r["peak_rss_mib"] > seen["peak_mib"]:
            fresh[name] = {"peak_mib": int(r["peak_rss_mib"]), "seconds": float(r["seconds"])}
    units.update(fresh)
    measured = [*((table or {}).get("measured") or []), f"{origin}: {len(fresh)} units"]
    return {"about": ABOUT, "measured": measured, "units": dict(sorted(units.items()))}


def dumps(table: Mapping) -> str:
    """The table as JSON, one line per unit (diffs of a refresh read unit by unit)."""
    units = ",\n".join(
        f"  {json.dumps(name)}: {json.dumps(unit)}" for name, unit in table["units"].items()
    )
    head = json.dumps({k: v for k, v in table.items() if k != "units"}, indent=1)[:-2]
    return f'{head},\n "units": {{\n{units}\n }}\n}}\n'


def refreshed(release_dir: Path, stats: list[Path], start: dict | None) -> dict:
    table = start
    for path in stats:
        origin = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
        table = merge(table, _stats.tu_stats(path), str(origin))
    return table or merge(None, [], "empty")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("release_dir", type=Path)
    parser.add_argument("stats", type=Path, nargs="+")
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument(
        "--fresh", action="store_true", help="start from an empty table (not the current one)"
    )
    args = parser.parse_args()
    file = args.release_dir / _release_files.TABLE_FILE
    current = None
    if file.is_file() and not args.fresh and not args.check:
        current = json.loads(file.read_text())
    table = refreshed(args.release_dir, args.stats, current)
    text = dumps(table)
    if args.check:
        same = file.is_file() and file.read_text() == text
        print(f"{file}: {'up to date' if same else 'differs from these records'}")
        return 0 if same else 1
    file.write_text(text)
    largest = max(u["peak_mib"] for u in table["units"].values())
    print(f"{file}: {len(table['units'])} units, largest peak {largest} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
