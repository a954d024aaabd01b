"""Forward variants of one head dim and dtype compiled together (flavours/fa3/_groups): how
setup.py's units are cut into groups, what the driver replaces, how the cost and memory models
price a group, and which size the model picks (docs/benchmarks.md, lease j)."""

from __future__ import annotations

import pytest
from test_fa3_costs import MAIN

from fa_backend.flavours import _registry, _release_files
from fa_backend.flavours.fa3 import _costs, _groups, _releases, _units

GIB = 1024**3
MAIN_LINE = _releases.release("main-0251105a")


def _planned(**settings: str) -> tuple[list[str], _units.Fa3Tailoring]:
    config = {k.replace("_", "-"): v for k, v in settings.items()}
    tailoring = _units.tailoring(_registry.load_settings(config, environ={}), MAIN)
    return _units.planned(MAIN_LINE, tailoring), tailoring


def test_each_head_dim_and_dtype_is_cut_into_balanced_groups_and_nothing_is_lost():
    units, _ = _planned()
    for size in _groups.SIZES:
        layout = _groups.layout(units, size)
        held = [m for members in layout.values() for m in members]
        assert sorted(held) == sorted(units), size  # every unit once, none added
        for name, members in layout.items():
            assert len(members) <= size
            assert _groups.members(name, units) == members  # the name says what it holds
            assert _groups.variants(name) == len(members)
    layout = _groups.layout(units, 4)
    # 10 variants of hdim128 bf16 in 3 groups of 4, 3, 3; each group one head dim and dtype
    assert [len(layout[f"flash_fwd_hdim128_bf16_group{i}of3x{n}_sm90.cu"]) for i, n in
            ((1, 4), (2, 3), (3, 3))] == [4, 3, 3]  # fmt: skip
    for members in layout.values():
        assert len({m.split("_sm90")[0].split("_")[2:4][0] for m in members}) == 1


def test_backward_helpers_and_the_head_dim_64_pairs_stay_as_upstream_cuts_them():
    units, _ = _planned()
    layout = _groups.layout(units, 5)
    singles = {name for name, members in layout.items() if members == [name]}
    assert {u for u in units if u.startswith("flash_bwd_")} <= singles
    assert {"flash_api_stable.cpp", _units.SCHEDULER, _units.COMBINE} <= singles
    # five hdim64_512 variants in one unit ran past 1,618 s on the H200 box (lease j)
    pairs = {u for u in units if "hdim64_256" in u or "hdim64_512" in u}
    assert pairs and pairs <= singles
    assert "flash_fwd_hdim192_128_bf16_group1of2x5_sm90.cu" in layout
    assert len(layout) == 89  # 233 units: 36 groups of five, 40 pairs, 10 backward, 3 helpers


def test_a_set_with_one_variant_per_head_dim_has_no_group():
    units, _ = _planned(head_dims="128", dtypes="bf16", disable=_costs.TRAINING_OPTIONS.split(
        "disable=")[1])  # fmt: skip
    assert _groups.layout(units, 5) == {u: [u] for u in units}
    assert _groups.replacing(_groups.layout(units, 5)) == {}


def test_the_driver_compiles_a_group_for_its_first_member_and_nothing_for_the_others():
    units, _ = _planned(head_dims="128", dtypes="bf16", disable="fp8,paged-kv,packgqa")
    layout = _groups.layout(units, 2)
    replaced = _groups.replacing(layout)
    group = "flash_fwd_hdim128_bf16_group1of2x2_sm90.cu"
    first, second = layout[group]
    assert replaced[first] == [group] and replaced[second] == []
    compiled = [out for u in units for out in replaced.get(u, [u])]
    assert compiled == list(layout)  # what check() then finds in build.ninja, in order


def test_a_group_file_includes_its_members_as_upstream_has_them(tmp_path):
    units, _ = _planned(head_dims="128", dtypes="bf16", disable="fp8,paged-kv,packgqa")
    layout = _groups.layout(units, 4)
    _groups.write(tmp_path, layout)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(n for n, m in layout.items() if m != [n])
    text = (tmp_path / written[0]).read_text()
    assert [line.split('"')[1] for line in text.splitlines() if line.startswith("#include")] == (
        layout[written[0]]
    )


def test_a_group_costs_less_than_its_members_apart_and_holds_more_memory():
    units, tailoring = _planned()
    table = _release_files.load_units(MAIN_LINE.directory)
    peak = _costs.memory_model(tailoring, table, units)
    group = "flash_fwd_hdim128_bf16_group1of2x5_sm90.cu"
    members = _groups.members(group, units)
    seconds = _costs.unit_seconds(group, tailoring)
    apart = sum(_costs.unit_seconds(m, tailoring) for m in members)
    # lease j: groups of five took 1.8-2.3 x one of their members, 0.15-0.47 GiB more each
    assert 2.0 * apart / 5 <= seconds <= 2.4 * apart / 5
    # measured (leases j and k): the table's figure, above its heaviest member, below the rule
    heaviest = max(map(peak, members))
    rule = heaviest + 4 * _costs.GROUP_PEAK_PER_VARIANT
    assert heaviest < peak(group) == table.peak_bytes(group) < rule
    # a group no build measured, by the rule: above what each measured group whose members
    # were measured too held per variant
    pair = "flash_fwd_hdim128_bf16_group1of5x2_sm90.cu"
    assert peak(pair) == max(map(peak, _groups.members(pair, units))) + _costs._group_extra(pair)
    measured = [
        (name, inside)
        for name in table.units
        if len(inside := _groups.members(name, units)) > 1 and all(m in table.units for m in inside)
    ]
    assert len(measured) >= 4
    for name, inside in measured:
        held = (table.peak_bytes(name) - max(map(peak, inside))) / (len(inside) - 1)
        assert 0 < held <= _costs.GROUP_PEAK_PER_VARIANT, name


@pytest.mark.parametrize(
    "settings, jobs, memory, size",
    [
        ({}, 16, 120 * GIB, 5),  # the full set on the H100 box: what lease j measured
        ({"head_dims": "128", "dtypes": "bf16"}, 64, 480 * GIB, 1),  # cores to spare
        ({"head_dims": "128", "dtypes": "bf16"}, 2, 22 * GIB, 5),  # the 2-core box
    ],
)
def test_the_model_picks_the_size_that_ends_first(settings, jobs, memory, size):
    units, tailoring = _planned(**settings)
    peak = _costs.memory_model(tailoring, _release_files.load_units(MAIN_LINE.directory), units)
    assert _groups.best_size(units, _costs.cost_model(tailoring), peak, jobs, memory) == size
