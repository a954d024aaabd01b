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
from collections.abc import Mapping
from pathlib import Path

from ..core._errors import FaShimError

TABLE_FILE = "units.json"
MIB = 1024**2


@dataclasses.dataclass(frozen=True)
class UnitTable:
    units: Mapping[str, Mapping[str, float]]

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


def load(release_dir: Path) -> UnitTable | None:
    """The release's table, None where it has none."""
    file = release_dir / TABLE_FILE
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        units = {str(k): dict(v) for k, v in data["units"].items()}
        return UnitTable(units)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FaShimError(
            f"{file} is not a table of compile units ({exc}).",
            fix="regenerate it with bench/unit_table.py (docs/benchmarks.md).",
        ) from None
