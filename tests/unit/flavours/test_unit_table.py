"""Each release's table of per-unit peaks and times (flavours/_release_files, units.json beside
release.toml): how a refresh (bench/unit_table.py) folds a build's launcher records in and
FA2's memory model over it.
(That FA2 2.8.3's table is what its recorded H100 runs make: test_unit_table_check.py.)"""

from __future__ import annotations

import json
import sys

import pytest
from conftest import REPO

from fa_backend.core._errors import FaShimError
from fa_backend.flavours import _release_files
from fa_backend.flavours.fa2 import _costs
from fa_backend.toolchain import _jobs

sys.path.insert(0, str(REPO / "bench"))
import unit_table

MIB = 1024**2


def record(source, peak, seconds=10.0, exit=0):
    return {"source": source, "seconds": seconds, "peak_rss_mib": peak, "exit": exit}


def test_a_refresh_takes_the_new_runs_units_and_keeps_the_others():
    first = unit_table.merge(None, [record("a.cu", 100), record("b.cu", 200)], "run A")
    second = unit_table.merge(
        first,
        [
            record("b.cu", 150, 5.0),
            record("?", 15),  # nvcc's probes name no source
            record("c.cu", 900, exit=137),  # killed: its peak is where it died, not its peak
            record("d.cu", 300),
            record("d.cu", 350),  # compiled twice (a retried build): the larger peak
        ],
        "run B",
    )
    assert second["units"] == {
        "a.cu": {"peak_mib": 100, "seconds": 10.0},
        "b.cu": {"peak_mib": 150, "seconds": 5.0},
        "d.cu": {"peak_mib": 350, "seconds": 10.0},
    }
    assert second["measured"] == ["run A: 2 units", "run B: 2 units"]
    assert json.loads(unit_table.dumps(second)) == second


def test_a_table_reads_back_and_a_broken_one_is_one_error(tmp_path):
    assert _release_files.load_units(tmp_path) is None
    table = unit_table.merge(None, [record("x.cu", 2048)], "run")
    (tmp_path / "units.json").write_text(unit_table.dumps(table))
    loaded = _release_files.load_units(tmp_path)
    assert loaded.peak_bytes("y.cu", "x.cu") == 2048 * MIB and loaded.peak_bytes("y.cu") is None
    (tmp_path / "units.json").write_text('{"units": [1, 2]}')
    with pytest.raises(FaShimError, match="is not a table of compile units"):
        _release_files.load_units(tmp_path)


def test_fa2s_memory_model_reads_its_release_table():
    peak = _costs.memory_model("2.8.3", pinned=True)
    table = json.loads((REPO / "vendored_patches" / "2.8.3" / "units.json").read_text())["units"]
    bwd = "flash_bwd_hdim256_bf16_sm80.cu"
    assert peak(bwd) == table[bwd]["peak_mib"] * MIB  # the largest FA2 unit: 6.6 GiB
    part = "flash_fwd_split_hdim128_bf16_sm80.part1of4.cu"  # measured as itself
    assert peak(part) == table[part]["peak_mib"] * MIB
    # a part the table lacks is its whole source, never more; an unknown unit the one figure
    assert peak(f"{bwd[:-3]}.part2of3.cu") == peak(bwd)
    assert peak("flash_something_new.cu") == _jobs.JOB_BYTES_ONE_ARCH
    assert _costs.memory_model("2.8.3", pinned=False) is None  # another sdist: no table
    assert _costs.memory_model("2.7.4.post1", pinned=True) is None  # no table for it


def test_a_release_reads_the_table_its_release_toml_names(tmp_path, monkeypatch):
    """2.8.3.post2, the default, compiles 2.8.3's kernel sources but for a 64-bit index in two
    backward headers: it plans by 2.8.3's measured table (unit-table = "2.8.3"); a unit-table
    naming a release without a table is refused."""
    from fa_backend.flavours.fa2 import _releases

    bwd = "flash_bwd_hdim256_bf16_sm80.cu"
    assert _costs.memory_model("2.8.3.post2", True)(bwd) == _costs.memory_model("2.8.3", True)(bwd)
    release = tmp_path / "9.9.9"
    release.mkdir()
    text = (REPO / "vendored_patches" / "2.8.3.post2" / "release.toml").read_text()
    (release / "release.toml").write_text(text.replace('"2.8.3"', '"2.7.3"'))
    monkeypatch.setattr(_releases, "VENDORED", tmp_path)
    with pytest.raises(FaShimError, match=r"unit-table = '2\.7\.3' names no release with a units"):
        _releases._load(release)
