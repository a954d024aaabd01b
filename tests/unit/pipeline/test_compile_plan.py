"""How one build's units run (fa_backend/pipeline/_compile_plan.py), from real FA2 plans: the
sample (no memory model: the toolchain's jobs, as given) and the pinned 2.8.3 sdist (its
units.json: pools over each unit's measured peak), what the driver writes into build.ninja, and
what an out-of-memory kill lowers. The pools' own search: tests/unit/schedule/test_pools.py."""

from __future__ import annotations

import json

from conftest import REPO, SHARED_SDISTS, fa2_plan

from fa_backend.flavours._interface import Tools
from fa_backend.pipeline import _compile_plan
from fa_backend.schedule import _schedule
from fa_backend.toolchain._archs import ArchChoice, Selection

GIB = 1024**3
ONE_ARCH = ArchChoice(Selection(("80",), "setting cuda-archs"), ("80",), (), {})
UNITS = json.loads((REPO / "vendored_patches" / "2.8.3" / "units.json").read_text())["units"]
HEAVY = "flash_bwd_hdim256_bf16_sm80.cu"  # 6.6 GiB, the largest FA2 unit
LIGHT = "flash_fwd_hdim64_bf16_sm80.cu"


def _tools(jobs: int) -> Tools:
    return Tools(nvcc=None, archs=ONE_ARCH, jobs=jobs, nvcc_threads=1, compiler_cache=None)


def test_without_a_memory_model_the_toolchains_jobs_run_every_unit(sample_sdist_dir):
    plan = fa2_plan(sample_sdist_dir)
    made = _compile_plan.make(plan, _tools(3), ["flash_api.cpp"], cores=8, memory=64 * GIB)
    assert made.jobs == 3 and made.pools.capped == () and made.peaks == {}
    assert made.driver_spec() == {"unit_order": list(made.order), "pools": {}, "unit_pools": {}}
    assert made == _compile_plan.CompilePlan(made.pools, made.order, {})


def test_the_pinned_sdists_units_are_pooled_by_their_measured_peaks():
    plan = fa2_plan(SHARED_SDISTS, "2.8.3")
    sources = sorted(UNITS)
    made = _compile_plan.make(plan, _tools(16), sources, cores=16, memory=64 * GIB)
    assert made.peaks[HEAVY] == UNITS[HEAVY]["peak_mib"] * 1024**2
    # 16 jobs of the heaviest units would need ~105 GiB, one figure per unit allows 8 jobs: pools
    # cap the heavy classes and the light units run beside them, within the memory
    assert made.jobs > 8 and made.pools.capped, made.pools
    assert _schedule.worst_case(made.peaks, made.pools) <= 64 * GIB
    assert sorted(made.order) == sources
    assert made.order.index(HEAVY) < made.order.index(LIGHT)  # the long units start first
    spec = made.driver_spec()
    assert spec["unit_pools"][HEAVY] in spec["pools"]


def test_a_max_jobs_setting_is_kept_as_given():
    plan = fa2_plan(SHARED_SDISTS, "2.8.3", max_jobs="5")
    made = _compile_plan.make(plan, _tools(5), sorted(UNITS), cores=16, memory=200 * GIB)
    assert made.jobs == 5


def test_an_oom_kill_lowers_the_heaviest_pool_then_the_jobs():
    peaks = {HEAVY: 7 * GIB, "b.cu": 7 * GIB, LIGHT: GIB}
    made = _compile_plan.CompilePlan(_schedule.Pools(4), (), peaks)
    lowered = made.lowered()
    assert lowered.jobs == 4 and [(c.gib, c.depth) for c in lowered.pools.capped] == [(7, 1)]
    message = _compile_plan.retry_message(made, lowered, done=3)
    assert message == (
        "a compiler was killed for lack of memory; retrying with at most 1 of the 2 units of "
        "7 GiB at once, 4 job(s), keeping the 3 object(s) already compiled "
        "(set -C max-jobs to choose)"
    )
    one = _compile_plan.CompilePlan.jobs_only(1)
    assert one.lowered() is None and one.jobs == 1


def test_apply_writes_the_order_and_pools_into_build_ninja(tmp_path):
    ninja = tmp_path / "build.ninja"
    ninja.write_text(
        "rule cuda_compile\n  command = nvcc $in\n"
        f"build a.o: cuda_compile /s/{LIGHT}\n"
        f"build b.o: cuda_compile /s/{HEAVY}\n"
        "build m.so: link a.o b.o\n"
    )
    peaks = {HEAVY: 7 * GIB, LIGHT: GIB}
    pools = _schedule.Pools(2, (_schedule.MemoryClass(7, frozenset({HEAVY}), 1),))
    _compile_plan.apply(ninja, _compile_plan.CompilePlan(pools, (HEAVY, LIGHT), peaks))
    text = ninja.read_text()
    assert "pool fa_shim_mem_7g\n  depth = 1" in text
    assert text.index(HEAVY) < text.index(LIGHT)
    assert "build m.so: link a.o b.o" in text  # the link keeps upstream's object order
    before = text
    _compile_plan.apply(ninja, _compile_plan.CompilePlan(pools, (HEAVY, LIGHT), peaks))
    assert ninja.read_text() == before  # applied again: the same file
