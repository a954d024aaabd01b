"""Each compile unit's measured peak memory and time, per release: `units.json` beside the
release's release.toml (vendored_patches/<version>/ for FA2, vendored_patches/fa3/<version>/ for
FA3). The compiler launcher records every unit of a real build (pipeline/_stats);
`bench/unit_table.py RELEASE_DIR STATS.jsonl...` folds such records into the table, so the
figures a build plans its jobs by are the ones its compilers showed (issue 24).

    {"about": "...", "measured": ["<where each refresh came from>", ...],
     "units": {"<unit basename>": {"peak_mib": 6717, "seconds": 303.9}, ...}}

Figures are for one architecture per job (the launcher's peak is the largest compiler process
of the unit). A unit the table lacks is looked up by the names a flavour says stand for it
(FA2: a part's whole source), else it has no figure.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..core._errors import FaShimError

TABLE_FILE = "units.json"
MIB = 1024**2
ABOUT = (
    "Each compile unit's peak memory (MiB, the largest compiler process) and time (s) for one "
    "architecture, from fa-shim's compiler launcher in real builds; refreshed by "
    "bench/unit_table.py (issue 24)."
)


@dataclasses.dataclass(frozen=True)
class UnitTable:
    units: Mapping[str, Mapping[str, float]]
    measured: tuple[str, ...]

    def peak_bytes(self, *names: str) -> int | None:
        """The first of these names the table has, its peak in bytes."""
        for name in names:
            unit = self.units.get(name)
            if unit and unit.get("peak_mib"):
                return int(unit["peak_mib"] * MIB)
        return None

    def seconds(self, *names: str) -> float | None:
        for name in names:
            unit = self.units.get(name)
            if unit and unit.get("seconds"):
                return float(unit["seconds"])
        return None


def path(release_dir: Path) -> Path:
    return release_dir / TABLE_FILE


def load(release_dir: Path) -> UnitTable | None:
    """The release's table, None where it has none."""
    file = path(release_dir)
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        units = {str(k): dict(v) for k, v in data["units"].items()}
        return UnitTable(units, tuple(data.get("measured", ())))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FaShimError(
            f"{file} is not a table of compile units ({exc}).",
            fix="regenerate it with bench/unit_table.py (docs/benchmarks.md).",
        ) from None


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
