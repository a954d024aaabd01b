"""The estimate before the wait, for real: a prepare of the 2.8.3 sdist under the CUDA torch 2.11
venv prints a block that agrees with the build description it writes (prepare compiles
nothing). The block from plans and toolchain decisions as values: tests/unit/pipeline/
test_estimate.py; the cost model and the schedule: tests/unit/toolchain/test_schedule.py."""

from __future__ import annotations

import json
import os

import pytest
from conftest import REPO, SHARED_SDISTS, run

from fa_backend.flavours.fa2 import _costs
from fa_backend.schedule import _schedule
from fa_backend.toolchain import _jobs

FA2 = _costs.model(0)  # the cost of each FA2 source, no DISABLE switch


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
