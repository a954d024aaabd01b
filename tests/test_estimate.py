"""The estimate before the wait: the cost model is the recorded run's, the recorded builds fall in
its range, the ETA counts running work, and a real prepare of the 2.8.3 sdist prints a block
that agrees with the build description it writes (prepare compiles nothing)."""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import REPO, SHARED_SDISTS, run

from fa_backend.flavours.fa2 import _costs
from fa_backend.toolchain import _jobs, _schedule

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
        # the one recorded exception: the unsplit DISABLE builds (0.69, 0.73; benchmarks.md)
        floor = low - 0.05 if "disable, unsplit" in build else low
        assert floor <= ratio <= high, (build, machine, round(ratio, 2))


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


@pytest.mark.slow
def test_prepare_prints_the_estimate_block(torch211_python, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FA_SHIM_")}
    env["CUDA_VISIBLE_DEVICES"] = ""  # the no-GPU box whatever the machine
    cases = {
        "default": [],  # no GPU: torch's arch list, the full set: hours, with suggestions
        "tailored": [
            *("-C", "cuda-archs=80", "-C", "head-dims=128"),
            *("-C", "dtypes=bf16", "-C", "forward-only=true"),
        ],
    }
    for name, settings in cases.items():
        proc = run(
            [
                *(torch211_python, "-m", "fa_backend", "prepare", "--build-dir", tmp_path / name),
                *("-C", f"sdist-dir={SHARED_SDISTS}", "-C", "compiler-cache=none", *settings),
            ],
            cwd=REPO,
            env=env,
        )
        described = json.loads(proc.stdout)  # stdout is the JSON, nothing else
        estimate = described["estimate"]
        commands = described["compile_commands"]
        archs = described["provenance"]["cuda_arch_choice"]["compiled"]
        assert estimate["sources"] == len(commands)
        assert estimate["archs"] == len(archs)
        sources = [c["file"].rsplit("/", 1)[-1] for c in commands]
        cores = _jobs.available_cores()  # this machine, as the child saw it
        machine = _schedule.Machine(estimate["jobs"], estimate["threads"], cores, len(archs))
        assert estimate["seconds"] == round(_schedule.predict(sources, machine, FA2))
        for line in estimate["lines"]:
            assert f"fa-shim: {line}" in proc.stderr  # the block a build prints
        block = "\n".join(estimate["lines"])
        assert f"about to compile {len(commands)} source(s) x {len(archs)} architecture" in block
        if name == "default":
            assert "80, 86, 90, 100, 120 from torch's CUDA arch list -> " in block, block
            assert "-> sm_80, sm_90, sm_100, sm_120" in block
            assert estimate["seconds"] > 30 * 60
            faster = [line for line in estimate["lines"] if "faster:" in line]
            assert any("-C cuda-archs=90" in line for line in faster), block
            assert any("-C head-dims=128 -C dtypes=bf16 -C forward-only=true" in f for f in faster)
        else:
            assert "80 from setting cuda-archs -> sm_80" in block
            assert len(commands) == 5 and "faster:" not in block
