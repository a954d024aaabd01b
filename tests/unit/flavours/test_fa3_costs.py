"""FlashAttention-3's cost and memory models (flavours/fa3/_costs.py) against what was measured
(docs/benchmarks.md; the module's docstring lists each figure): a unit's seconds and peak, and
whole builds scheduled by schedule/_schedule as the estimate block does."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import REPO
from packaging import tags

from fa_backend.flavours import _registry, _release_files
from fa_backend.flavours._interface import Plan
from fa_backend.flavours.fa3 import _costs, _flavour, _groups, _releases
from fa_backend.flavours.fa3 import _units as _fa3_units
from fa_backend.pipeline import _stats
from fa_backend.schedule import _schedule
from fa_backend.toolchain._torch import TorchInfo

GIB = 1024**3
MIB = 1024**2
RECORDED = Path(__file__).parent / "fa3_units"
MAIN = (
    "BACKWARD", "SPLIT", "PAGEDKV", "APPENDKV", "LOCAL", "SOFTCAP", "PACKGQA", "FP16", "FP8",
    "VARLEN", "CLUSTER", "HDIM64", "HDIM96", "HDIM128", "HDIM192", "HDIM256", "SM80",
    "HDIMDIFF64", "HDIMDIFF192",
)  # fmt: skip
NO_FEATURES = "fp8,split,paged-kv,appendkv,local,softcap,packgqa,varlen,cluster"
H100 = _schedule.Machine(jobs=16, threads=1, cores=16, archs=1)  # 16 cores, 128 GiB


def _units(name: str) -> list[str]:
    return [u for u in (RECORDED / name).read_text().splitlines() if u and u[0] != "#"]


def _tailoring(**settings: str) -> _fa3_units.Fa3Tailoring:
    config = {k.replace("_", "-"): v for k, v in settings.items()}
    return _fa3_units.tailoring(_registry.load_settings(config, environ={}), MAIN)


def test_units_cost_what_was_measured_with_every_feature():
    full = _tailoring()
    assert _costs.unit_seconds("flash_bwd_hdim128_bf16_softcapall_sm90.cu", full) == 256
    assert 181 <= _costs.unit_seconds("flash_fwd_hdim96_e4m3_paged_sm90.cu", full) <= 234
    # v2.8.3's aggregates: hdimall 864-973 s for five head dims, hdimdiff 497 s for three pairs
    assert 864 <= _costs.unit_seconds("flash_fwd_hdimall_bf16_sm90.cu", full) <= 973
    assert 497 <= _costs.unit_seconds("flash_fwd_hdimdiff_bf16_sm90.cu", full) <= 600
    # main's head-dim pair units, 22 measured at 16 jobs: 193-326 s
    assert 193 <= _costs.unit_seconds("flash_fwd_hdim192_128_fp16_sm90.cu", full) <= 326


def test_peaks_are_the_measured_maxima():
    full = _tailoring()
    assert _costs.unit_peak("flash_fwd_hdim128_bf16_sm90.cu", full) == 7.25 * GIB  # 4.7-7.11
    assert _costs.unit_peak("flash_fwd_hdim64_256_bf16_sm90.cu", full) == 7.5 * GIB  # 6.0-7.46
    assert _costs.unit_peak("flash_bwd_hdim64_fp16_softcapall_sm90.cu", full) == 6.5 * GIB  # 6.49
    assert 22 * GIB <= _costs.unit_peak("flash_fwd_hdimall_e4m3_sm90.cu", full) <= 23 * GIB
    assert 13.2 * GIB <= _costs.unit_peak("flash_fwd_hdimdiff_bf16_sm90.cu", full) <= 14 * GIB
    assert _costs.unit_peak("flash_api_stable.cpp", full) < 1 * GIB  # 0.51 measured
    # a tailored v2.8.3 aggregate holds one head dim, and no head-dim pair
    one = _tailoring(head_dims="128")
    assert _costs.unit_peak("flash_fwd_hdimall_bf16_sm90.cu", one) == 6 * GIB
    assert _costs.unit_peak("flash_fwd_hdimdiff_bf16_sm90.cu", one) == 6 * GIB


def test_a_unit_its_lines_table_has_takes_its_measured_peak():
    """main-0251105a's units.json (four slices of its full set, 16 cores): a measured unit
    plans by its own peak; a unit the table lacks by the constants, which are above every
    measured unit of their kind."""
    directory = _releases.release("main-0251105a").directory
    table = _release_files.load_units(directory)
    full = _tailoring()
    peak = _costs.memory_model(full, table)
    singles = [n for n in table.units if _groups.variants(n) == 1]  # a group: test_fa3_groups
    heaviest = max(singles, key=lambda n: table.units[n]["peak_mib"])
    lightest = min(singles, key=lambda n: table.units[n]["peak_mib"])
    assert peak(heaviest) == table.units[heaviest]["peak_mib"] * MIB <= _costs.PAIR_PEAK
    assert peak(lightest) == table.units[lightest]["peak_mib"] * MIB < 5 * GIB
    assert peak("flash_fwd_hdim128_bf16_sm90.cu") == _costs.FWD_PEAK  # a tailored unit's name
    for name, unit in table.units.items():
        assert unit["peak_mib"] * MIB <= _costs.unit_peak(name, full), name


def test_the_flavour_sizes_the_full_main_set_by_its_lines_table():
    """A measured unit plans by its own peak; the heaviest figure (7.5 GiB: a pair unit not yet
    measured, 7.46 GiB the heaviest that was) bounds the jobs of upstream's units: 16 on the
    H100 box's 124 GiB, 8 on 64 GiB, the cut said. With the size the model picks, five forward
    variants to a unit (9.2 GiB), 13."""
    settings = _registry.load_settings(
        {"fa3-group": "1"}, environ={}, project_dir=REPO / "flash-attn-3"
    )
    release = _releases.release("main-0251105a")
    source = _flavour.Fa3Source(release, None, _fa3_units.tailoring(settings, MAIN))
    torch = TorchInfo("2.11.0", "13.0", 1, None, "/venv/torch", "c++17", "python", False)
    tag = tags.Tag("cp310", "abi3", "linux_x86_64")
    plan = Plan(settings, torch, _flavour.FLAVOUR, source, (), "3.0.0", tag, "", "2.9.0")
    heaviest = "flash_fwd_hdim192_128_e4m3_softcap_packgqa_sm90.cu"
    assert _flavour.FLAVOUR.costs(plan).peak_bytes(heaviest) == 7639 * MIB
    assert _flavour.FLAVOUR.sizing(plan, None, 16, 124 * GIB).jobs == 16
    small = _flavour.FLAVOUR.sizing(plan, None, 16, 64 * GIB)
    assert small.jobs == 8 and "a FlashAttention-3 unit of this set needs 8 GiB" in small.cut
    auto = dataclasses.replace(
        plan, settings=dataclasses.replace(settings, own={**settings.own, "fa3-group": None})
    )
    grouped = _flavour.FLAVOUR.sizing(auto, None, 16, 124 * GIB)
    assert (grouped.shape[_flavour.GROUP], grouped.jobs) == (5, 13)


def test_the_tailored_stable_set_is_predicted_as_measured():
    """H100 (issue 23): 179 s built by hand, varlen kept; the 2-core box: 184 s (REPORT)."""
    varlen_kept = _tailoring(
        head_dims="128", dtypes="bf16", disable=NO_FEATURES.replace(",varlen", "")
    )
    units = _units("main-0251105a-hdim128-bf16-nofeatures.txt")
    h100 = _schedule.predict(units, H100, _costs.cost_model(varlen_kept))
    assert 0.7 * 179 <= h100 <= 1.3 * 179
    two_cores = _schedule.Machine(jobs=2, threads=1, cores=2, archs=1)
    box = _schedule.predict(units, two_cores, _costs.cost_model(varlen_kept))
    assert 0.7 * 184 <= box <= 1.3 * 184


def test_the_full_sets_on_one_h100_box():
    """v2.8.3: memory allows 5 of its 22 GiB units on 128 GiB (2.1-3.3 h by bench/fa3_full_model);
    main's per-head-dim units (7 GiB) let 16 run: about 50 minutes, as issue 24 models it."""
    full = _tailoring()
    v283 = _schedule.predict(
        _units("v2.8.3-full.txt"), _schedule.Machine(5, 1, 16, 1), _costs.cost_model(full)
    )
    assert 2.1 * 3600 <= v283 <= 3.3 * 3600
    main = _schedule.predict(_units("main-0251105a-full.txt"), H100, _costs.cost_model(full))
    assert 40 * 60 <= main <= 60 * 60


@pytest.mark.parametrize("off, factor", [(0, 1.0), (5, 0.5)])
def test_in_unit_switches_shrink_a_unit(off, factor):
    features = ",".join(["local", "varlen", "appendkv", "cluster", "softcap"][:off])
    t = _tailoring(disable=features) if features else _tailoring()
    assert _costs.unit_seconds("flash_bwd_hdim128_bf16_sm90.cu", t) == pytest.approx(256 * factor)


BIG_BOX = REPO / "bench" / "results" / "2026-11-28-h200x4-fa3-full" / "fa3-full-tus.jsonl"


def test_the_full_set_on_the_64_core_box_replays_as_it_ran():
    """Issue 45: main-0251105a's full set in groups of five as fa-shim planned it on the 64-core
    box (62 jobs, 802 s wall): the order its cost model gives, replayed on each unit's recorded
    time, ends when the build's compile phase did, within 1.05 x max(longest, sum/62), and the
    recorded longest unit starts in the first wave."""
    rows = _stats.compiled(BIG_BOX)
    recorded = {Path(r["source"]).name: float(r["seconds"]) for r in rows}
    assert len(recorded) == 89
    cost = _costs.cost_model(_tailoring())
    order = _schedule.best_order({n: cost(n) for n in recorded}, 62)
    replayed = _schedule.simulate(order, recorded, 62)
    assert abs(replayed - _stats.compile_span(rows)) < 2.0
    assert replayed <= 1.05 * max(max(recorded.values()), sum(recorded.values()) / 62)
    assert order.index(max(recorded, key=recorded.get)) < 62
