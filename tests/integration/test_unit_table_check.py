"""FA2 2.8.3's table of per-unit peaks and times (vendored_patches/2.8.3/units.json) is what its
recorded H100 runs make: bench/unit_table.py --check, run as a maintainer refreshes it."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

RUN3 = REPO / "docs" / "gpu-runs" / "2026-11-22-h100" / "run3"


def test_fa2_283s_table_is_what_its_recorded_runs_make():
    runs = [RUN3 / f"{n}-tus.jsonl" for n in ("full", "tailored-disable", "tailored")]
    script, release = REPO / "bench" / "unit_table.py", REPO / "vendored_patches" / "2.8.3"
    proc = subprocess.run(
        [sys.executable, script, release, *runs, "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
