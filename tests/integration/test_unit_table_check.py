"""Each release's table of per-unit peaks and times (units.json beside its release.toml) is what
its recorded H100 runs make: bench/unit_table.py --check, run as a maintainer refreshes it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO

RUNS = REPO / "bench" / "results"
RUN3 = RUNS / "2026-11-22-h100" / "run3"
TABLES = {
    "2.8.3": [RUN3 / f"{n}-tus.jsonl" for n in ("full", "tailored-disable", "tailored")],
    # FA3's main line: four slices of its full set (every feature: the figures its memory
    # model takes for a unit, which a tailored unit never exceeds), the last two with forward
    # variants in groups of five
    "fa3/main-0251105a": [
        RUNS / "2026-11-24-h100-lease-b" / "fa3-slice-tus.jsonl",
        RUNS / "2026-11-25-h100-lease-f" / "fa3-slice-tus.jsonl",
        RUNS / "2026-11-26-h200-lease-j" / "fa3-slice-tus.jsonl",
        RUNS / "2026-11-26-h200-lease-k" / "fa3-slice-tus.jsonl",
    ],
}


@pytest.mark.parametrize("release", sorted(TABLES))
def test_a_releases_table_is_what_its_recorded_runs_make(release):
    script = REPO / "bench" / "unit_table.py"
    runs = TABLES[release]
    proc = subprocess.run(
        [sys.executable, script, REPO / "vendored_patches" / release, *runs, "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
