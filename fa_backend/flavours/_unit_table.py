"""Each compile unit's measured peak memory and time (one architecture per job), per release:
`units.json` beside its release.toml, folded by `bench/unit_table.py` from a real build's records
(pipeline/_stats), so that a build plans its jobs by what its compilers showed (issue 24):

    {"about": "...", "measured": [...], "units": {"<unit>": {"peak_mib": 6717, "seconds": 303.9}}}
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
