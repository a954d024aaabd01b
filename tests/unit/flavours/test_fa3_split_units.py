"""FA3 v2.8.3's forward aggregates as the files they include (flavours/fa3/_units): read from the
pinned hopper tree, the full set's 60 aggregates become 220 per-head-dim units; a tailored set
keeps the files of its head dims (a file all under a DISABLE switch the set turns on compiles to
nothing); the release registry says which releases split. That the split build has the same
kernels is tests/e2e/test_fa3_unit_symbols.py's compile."""

from __future__ import annotations

import pytest

from fa_backend.flavours.fa3 import _releases, _units

HDIMS = ("64", "96", "128", "192", "256")


def off_except(*head_dims):
    return {f"HDIM{d}" for d in HDIMS if d not in head_dims}


@pytest.fixture(scope="module")
def hopper(fa3_trees):
    return fa3_trees["hopper"] / "hopper"


def test_v283_splits_its_aggregates_by_the_registry():
    assert _releases.release("2.8.3").split_aggregates


def test_the_full_set_compiles_every_included_file(hopper):
    split = _units.split_sources(hopper, off=set())
    assert len(split) == 60  # hdimall and hdimdiff x bf16, fp16, e4m3 x 10 feature variants
    assert all(_units.is_aggregate(name) for name in split)
    assert split["flash_fwd_hdimall_bf16_sm90.cu"] == [
        f"flash_fwd_hdim{d}_bf16_sm90.cu" for d in HDIMS
    ]
    assert split["flash_fwd_hdimdiff_bf16_paged_split_sm90.cu"] == [
        "flash_fwd_hdim64_256_bf16_paged_split_sm90.cu",
        "flash_fwd_hdim64_512_bf16_paged_split_sm90.cu",
        "flash_fwd_hdim192_128_bf16_paged_split_sm90.cu",
    ]
    assert split["flash_fwd_hdimdiff_e4m3_sm90.cu"] == ["flash_fwd_hdim192_128_e4m3_sm90.cu"]
    units = {u for files in split.values() for u in files}
    assert len(units) == sum(map(len, split.values())) == 220
    assert all((hopper / _units.INSTANTIATIONS / u).is_file() for u in units)


def test_a_tailored_set_keeps_the_files_of_its_head_dims(hopper):
    one = _units.split_sources(hopper, off_except("128") | {"FP8", "SPLIT"})
    assert one["flash_fwd_hdimall_bf16_sm90.cu"] == ["flash_fwd_hdim128_bf16_sm90.cu"]
    assert one["flash_fwd_hdimdiff_bf16_sm90.cu"] == []  # every pair left out: no unit at all
    pairs = _units.split_sources(hopper, off_except("64"))
    assert pairs["flash_fwd_hdimdiff_bf16_sm90.cu"] == [
        "flash_fwd_hdim64_256_bf16_sm90.cu",
        "flash_fwd_hdim64_512_bf16_sm90.cu",
    ]
    # switches that guard no included file (setup.py drops those aggregates itself) keep all
    assert (
        len(_units.split_sources(hopper, {"FP8", "PAGEDKV"})["flash_fwd_hdimall_fp16_sm90.cu"]) == 5
    )


def test_only_a_file_wholly_under_a_switch_that_is_on_is_left_out():
    guarded = (
        '// Copyright\n#include "flash_fwd_launch_template.h"\n\n'
        "#ifndef FLASHATTENTION_DISABLE_HDIM64\ntemplate void f<64>();\n#endif\n"
    )
    assert _units._compiled_away(guarded, {"HDIM64"})
    assert not _units._compiled_away(guarded, {"HDIM96"})
    assert not _units._compiled_away(guarded + "template void g<1>();\n", {"HDIM64"})
    two = guarded.replace("#endif\n", "#endif\n#ifndef FLASHATTENTION_DISABLE_FP8\n#endif\n")
    assert not _units._compiled_away(two, {"HDIM64"})  # two guards: kept (never guess)
    assert not _units._compiled_away("template void f<64>();\n", {"HDIM64"})


def test_the_switches_a_set_turns_on():
    env = (("FLASH_ATTENTION_DISABLE_HDIM64", "TRUE"), ("FLASH_ATTENTION_DISABLE_FP8", "FALSE"))
    assert _units.switches_on(env) == {"HDIM64"}
