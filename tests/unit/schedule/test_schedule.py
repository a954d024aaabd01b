"""The build-time model (schedule/_schedule.py with FA2's cost model, flavours/fa2/_costs.py):
the cost model is the recorded run's, the recorded builds fall in its range, sources, parts,
architectures and cores scale it, and the ETA counts running work. The block a real prepare
prints: tests/e2e/test_estimate_block.py."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO

from fa_backend.flavours.fa2 import _costs
from fa_backend.schedule import _schedule

sys.path.insert(0, str(REPO / "bench"))
import estimate_check

FWD = "flash_fwd_hdim128_bf16_sm80.cu"
SPLIT = "flash_fwd_split_hdim128_bf16_sm80.cu"
FA2 = _costs.model(0)  # the cost of each FA2 source, no DISABLE switch


def test_the_model_is_the_recorded_run():
    assert estimate_check.kernel_table() == _costs.KERNEL_SECONDS


def test_recorded_builds_fall_in_the_models_range():
    low, high = _schedule.RANGE
    for build, machine, sources, m, disabled, wall in estimate_check.recorded():
        ratio = wall / _schedule.predict(sources, m, _costs.model(disabled))
        assert low <= ratio <= high, (build, machine, round(ratio, 2))


def test_sources_parts_archs_and_cores_scale_the_estimate():
    one = _schedule.Machine(jobs=2, threads=1, cores=2, archs=1)
    four = _schedule.Machine(jobs=2, threads=1, cores=2, archs=4)
    sources = [FWD, SPLIT, "flash_api.cpp"]
    assert _schedule.predict(sources, four, FA2) > 3 * _schedule.predict(sources, one, FA2) - 100
    assert _schedule.predict(sources, one, _costs.model(5)) < _schedule.predict(sources, one, FA2)
    crowded = _schedule.Machine(jobs=4, threads=1, cores=2, archs=1)  # 4 compilers, 2 cores
    assert crowded.slowdown == 2.0
    parts = [f"flash_fwd_split_hdim128_bf16_sm80.part{k}of4.cu" for k in range(5)]
    wide = _schedule.Machine(jobs=16, threads=1, cores=16, archs=1)
    assert _schedule.predict(parts, wide, FA2) < _schedule.predict([SPLIT], wide, FA2)


def test_eta_counts_the_work_still_running():
    machine = _schedule.Machine(jobs=2, threads=1, cores=2, archs=1)
    split = _costs.source_seconds(SPLIT)
    # nothing finished, the split-KV source 60 s in: what it has left sets the ETA
    running = _schedule.remaining([], [(SPLIT, 60.0)], [], machine, FA2)
    assert running == pytest.approx(split - 60.0)
    # a source past its expected time still counts (never "0 min left" while it runs)
    assert _schedule.remaining([], [(SPLIT, 2 * split)], [], machine, FA2) > 0
    # finished sources twice as slow as the model: the rest is rescaled
    slow = _schedule.remaining([FWD], [], [(SPLIT, 2 * split)], machine, FA2)
    assert slow == pytest.approx(2 * _costs.source_seconds(FWD))


def test_makespan_puts_the_heaviest_first_on_the_slot_that_frees_first():
    assert _schedule.makespan([], 4) == 0.0
    assert _schedule.makespan([10, 10, 10, 10], 2) == 20
    assert _schedule.makespan([30, 10, 10, 10], 2) == 30  # 30 | 10+10+10
    assert _schedule.makespan([5], 2, busy=[40, 7]) == 40  # what runs already counts
    assert _schedule.makespan([5, 5], 1, busy=[3, 9]) == 13  # only as many busy as slots


def test_threads_compile_architectures_side_by_side_and_cores_are_shared():
    two = _schedule.Machine(jobs=1, threads=2, cores=2, archs=2)
    assert two.per_arch_parallel == 2 and two.slowdown == 1.0
    assert two.scale(100) == pytest.approx(100)  # both archs at once: one wave
    one = _schedule.Machine(jobs=1, threads=1, cores=2, archs=2)
    assert one.scale(100) == pytest.approx(100 * (0.2 + 0.8 * 2))  # the host part once
    crowded = _schedule.Machine(jobs=4, threads=2, cores=2, archs=2)
    assert crowded.slowdown == 4.0  # 8 compilers on 2 cores


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (20, "10-30 s"),
        (60, "40-80 s"),
        (600, "7-13 min"),
        (4000, "47-87 min"),
        (10000, "1.9-3.6 h"),
    ],
)
def test_the_estimate_is_shown_as_the_range_the_recorded_builds_fell_in(seconds, shown):
    assert _schedule.time_range(seconds) == shown


@pytest.mark.parametrize(
    ("busy", "shown"), [(0.4, "7-13 min"), (2.5, "7-33 min"), (8.0, "7-104 min")]
)
def test_on_a_busy_machine_the_range_reaches_as_much_higher(busy, shown):
    assert _schedule.time_range(600, busy) == shown  # the low end: the load may go


def test_without_a_cost_model_every_source_weighs_the_same():
    assert _schedule.uniform("flash_api.cpp") == _schedule.uniform("flash_fwd.cu") == 1.0
    machine = _schedule.Machine(jobs=1, threads=1, cores=1, archs=1)
    # progress rescales uniform costs by the sources already compiled: 2 done in 60 s each
    assert _schedule.remaining(
        ["c"], [], [("a", 60.0), ("b", 60.0)], machine, _schedule.uniform
    ) == (pytest.approx(60.0))
