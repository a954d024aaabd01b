"""How many parts each FA2 kernel source is compiled in (flavours/fa2/_costs.best_parts): the
count the build-time model finds fastest on the build's jobs, the idle-jobs rule where the model
barely differs. Parts pay where a source keeps its many kernels (no DISABLE switch); with four
or more switches a part costs what its whole source does (measured on the H100: the training
set whole in 107 s, in 4 parts 171 s), so such sets compile each source whole."""

from __future__ import annotations

from conftest import REPO, SHARED_SDISTS, fa2_plan

from fa_backend.flavours._interface import Tools
from fa_backend.flavours.fa2 import _costs, _tu_parts
from fa_backend.pipeline import _stats
from fa_backend.schedule import _schedule

GIB = 1024**3

FORWARD = [
    f"flash_{p}_hdim128_bf16{c}_sm80.cu" for p in ("fwd", "fwd_split") for c in ("", "_causal")
]
BACKWARD = [f"flash_bwd_hdim128_bf16{c}_sm80.cu" for c in ("", "_causal")]
FULL = [
    f"flash_{p}_hdim{h}_{d}{c}_sm80.cu"
    for p in ("fwd", "fwd_split", "bwd")
    for h in (32, 64, 96, 128, 192, 256)
    for d in ("fp16", "bf16")
    for c in ("", "_causal")
]


def test_the_model_picks_the_parts():
    # the forward-only inference set: the measured 4 parts on 16 jobs, 2 on 8
    assert _costs.best_parts(None, 16, 16, FORWARD, True, 0) == 4
    assert _costs.best_parts(None, 8, 8, FORWARD, True, 0) == 2
    # all five switches: splitting gains nothing, the idle-jobs rule (4) does not win a tie
    assert _tu_parts.choose(None, 16, FORWARD, True) == 4
    assert _costs.best_parts(None, 16, 16, FORWARD, True, 5) == 1
    # the training set (dropout, alibi, softcap, local off): whole sources
    training = FORWARD + BACKWARD
    assert _tu_parts.choose(None, 16, training, True) == 2
    assert _costs.best_parts(None, 16, 16, training, True, 4) == 1
    assert _costs.best_parts(None, 16, 16, training, True, 0) == 4  # every feature: parts pay
    assert 1 < _costs.best_parts(None, 16, 16, training, True, 2) < 4  # in between
    assert _costs.best_parts(None, 2, 2, training, True, 0) == 1  # a 2-core box: never
    assert _costs.best_parts(None, 16, 16, FULL, True, 0) == 1  # the full set fills 16 alone


def test_the_setting_and_the_release_decide_first():
    assert _costs.best_parts(3, 16, 16, FORWARD, True, 0) == 3
    assert _costs.best_parts(None, 16, 16, FORWARD, False, 0) == 1  # no patch: never split
    assert _costs.best_parts(None, 16, 16, None, True, 0) == 1  # an unknown kernel layout


def test_a_part_costs_its_whole_source_with_four_switches():
    source = FORWARD[0]
    half, quarter = _tu_parts.part_names(source, 2)[1], _tu_parts.part_names(source, 4)[1]
    assert _costs.source_seconds(half, 4) == _costs.source_seconds(source, 4)
    assert _costs.source_seconds(quarter, 5) == _costs.source_seconds(source, 5)
    assert _costs.source_seconds(quarter, 0) < 0.6 * _costs.source_seconds(source, 0)


def test_backward_sources_split_like_forward_ones():
    assert _tu_parts.splittable("flash_bwd_hdim128_bf16_causal_sm80.cu")
    names = _tu_parts.split_names(BACKWARD, 2)
    assert names == [p for k in BACKWARD for p in _tu_parts.part_names(k, 2)]
    assert _costs.source_seconds(names[0]) == _costs.PART0_OTHER_SECONDS
    assert _tu_parts.source_of(names[1]) == BACKWARD[0]


# ------------------------------------------- the full set on many cores: its longest sources cut

RUN3 = REPO / "bench" / "results" / "2026-11-22-h100" / "run3" / "full-tus.jsonl"


def _units(parts: int, whole: int) -> list[str]:
    cut = _costs.cut_sources(FULL, whole)
    return [*_tu_parts.split_names(FULL, parts, cut), "flash_api.cpp"]


def _replayed(units: list[str], recorded: dict[str, float], jobs: int) -> float:
    """The build's end on `jobs` jobs, started longest first by the cost model (a build's
    search only improves on it), each unit taking its recorded time; a part the model's share
    of its whole source's recorded time (run3 compiled every source whole)."""
    cost = _costs.model(0)

    def seconds(name: str) -> float:
        source = _tu_parts.source_of(name)
        return recorded[source] * cost(name) / cost(source)

    order = sorted(units, key=lambda n: (-cost(n), n))
    return _schedule.simulate(order, {n: seconds(n) for n in units}, jobs)


def test_the_full_set_cuts_its_longest_sources_only_where_cores_outnumber_the_work():
    # every job busy past the longest source: the same 73 whole units as before
    assert _costs.best_split(None, 16, 16, FULL, True, 0) == (1, 0)
    assert _costs.best_split(None, 32, 32, FULL, True, 0) == (1, 0)
    recorded = {r["source"]: float(r["seconds"]) for r in _stats.compiled(RUN3)}
    assert sorted(recorded) == sorted([*FULL, "flash_api.cpp"])
    ends, chosen = {}, {}
    for cores in (64, 128):
        parts, whole = chosen[cores] = _costs.best_split(None, cores, cores, FULL, True, 0)
        cut = _costs.cut_sources(FULL, whole)
        assert parts > 1 and 0 < len(cut) < 72
        # the ones cut are the model's longest: every source left whole is shorter
        assert min(map(_costs.source_seconds, cut)) >= max(
            _costs.source_seconds(k) for k in FULL if k not in cut
        )
        assert "flash_fwd_split_hdim64_fp16_sm80.cu" in cut  # run3's longest, 400 s
        ends[cores] = _replayed(_units(parts, whole), recorded, cores)
    assert chosen[64] == (4, 64)  # 8 sources in 4 parts (docs/kernel-sets.md)
    # unsplit, 64 jobs wait for the longest recorded source; cut, they end over 10 % sooner
    assert _replayed(_units(1, 0), recorded, 64) == max(recorded.values())
    assert ends[64] < 0.9 * max(recorded.values())
    assert ends[128] < ends[64]


def test_a_tailored_set_splits_every_source_and_the_setting_decides():
    training = FORWARD + BACKWARD
    assert _costs.best_split(None, 16, 16, FORWARD, True, 0) == (4, 0)
    assert _costs.best_split(None, 16, 16, training, True, 4) == (1, 0)
    assert _costs.best_split(3, 64, 64, FULL, True, 0) == (3, 0)  # -C tu-parts: every source
    assert _costs.best_split(None, 64, 64, FULL, False, 0) == (1, 0)  # no patch: never
    # with all five switches a part costs what its whole source does: nothing gains
    assert _costs.best_split(None, 64, 64, FULL, True, 5) == (1, 0)


def test_the_sources_cut_are_the_ones_the_build_lays_out(tmp_path):
    plan = fa2_plan(SHARED_SDISTS, "2.8.3")
    sizing = plan.flavour.sizing(plan, None, 64, 503 * GIB)
    assert (sizing.jobs, sizing.shape) == (64, {"tu_parts": 4, "tu_parts_whole": 64})
    assert (
        plan.flavour.shape_note(sizing.shape) == "each kernel source but the 64 shortest in 4 parts"
    )
    tools = Tools(None, None, sizing.jobs, sizing.threads, None, sizing.shape)
    planned = plan.flavour.planned_sources(plan, tools)  # the estimate's units
    assert sorted(planned) == sorted(_units(4, 64))
    # what the upstream driver compiles instead of each source, from the kernel directory
    kernel_dir = tmp_path / _tu_parts.KERNEL_DIR
    kernel_dir.mkdir(parents=True)
    for name in FULL:
        (kernel_dir / name).write_text("")
    split = plan.flavour.driver_spec(plan, tools, tmp_path)["split_sources"]
    assert sorted(split) == sorted(_costs.cut_sources(FULL, 64))
    assert sorted(p for parts in split.values() for p in parts) == sorted(
        n for n in planned if ".part" in n
    )
