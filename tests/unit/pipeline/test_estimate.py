"""The estimate block printed before compiling and by doctor (fa_backend/pipeline/_progress.py),
from real plans (the sample and the pinned flash-attn 2.8.3 sdist, planned by the FA2 flavour)
and real toolchain decisions: what will be compiled, where the architectures come from, the
jobs, the flavour's cost model through schedule/_schedule, the faster settings of a long build,
and the note of a flavour without a model. The block a real prepare prints is checked against
its build description in tests/e2e/test_estimate_block.py."""

from __future__ import annotations

import importlib.util
import json
import re

from conftest import REPO, SAMPLE_VERSION, SHARED_SDISTS, fa2_plan, planned

from fa_backend.flavours._interface import Tools
from fa_backend.flavours.fa2 import _costs
from fa_backend.pipeline import _progress
from fa_backend.schedule import _schedule
from fa_backend.toolchain._archs import ArchChoice, Selection
from fa_backend.toolchain._compile_commands import Command

TWO_ARCHS = ArchChoice(Selection(("80", "90"), "torch's CUDA arch list"), ("80", "90"), (), {})
ONE_ARCH = ArchChoice(Selection(("86",), "setting cuda-archs"), ("80",), (), {})
RESULTS = REPO / "bench" / "results"
ESTIMATE_CHECK = REPO / "bench" / "estimate_check.py"
TAILORED_SM80 = [
    f"flash_fwd{s}_hdim128_bf16{c}_sm80.cu" for s in ("", "_split") for c in ("", "_causal")
]


def test_build_sources_are_the_basenames_build_ninja_compiles():
    commands = [
        Command("cxx", "/b/csrc/flash_attn/flash_api.cpp", ()),
        Command("nvcc", "/b/csrc/flash_attn/src/flash_fwd_hdim128_bf16_sm80.cu", ()),
    ]
    assert _progress.build_sources(commands) == [
        "flash_api.cpp",
        "flash_fwd_hdim128_bf16_sm80.cu",
    ]


def test_a_short_build_says_what_how_and_how_long(sample_sdist_dir):
    plan = fa2_plan(sample_sdist_dir)
    tools = Tools(nvcc=None, archs=ONE_ARCH, jobs=2, nvcc_threads=None, compiler_cache=None)
    preview = _progress.preview(plan, tools, ["flash_api.cpp"], cores=2, load=0.0)
    assert preview.machine == _schedule.Machine(jobs=2, threads=1, cores=2, archs=1)
    assert list(preview.lines) == [
        "about to compile 1 source(s) x 1 architecture (kernel set full)",
        "  architectures: 86 from setting cuda-archs -> sm_80",
        "  jobs: 2 compile job(s) x 1 nvcc thread(s) on 2 core(s)",
        f"  estimate: {_schedule.time_range(preview.seconds)} (a per-source cost model "
        "calibrated on measured builds: docs/benchmarks.md)",
    ]


def test_a_long_full_build_suggests_faster_settings():
    plan = fa2_plan(SHARED_SDISTS, "2.8.3")
    tools = Tools(nvcc=None, archs=TWO_ARCHS, jobs=2, nvcc_threads=1, compiler_cache=None)
    sources = plan.flavour.planned_sources(plan, tools)
    preview = _progress.preview(plan, tools, sources, cores=2, load=0.0)
    assert preview.seconds > _progress.SUGGEST_ABOVE_SECONDS
    block = list(preview.lines)
    assert (
        block[0] == f"about to compile {len(sources)} source(s) x 2 architectures (kernel set full)"
    )
    assert block[1] == (
        "  architectures: 80, 90 from torch's CUDA arch list -> sm_80, sm_90 "
        "(set -C cuda-archs=... to build for your GPU only)"
    )
    faster = [line for line in block if line.startswith("  faster: ")]
    assert len(faster) == 3
    assert any("-C cuda-archs=90" in line for line in faster), faster
    assert any("-C head-dims=128 -C dtypes=bf16 -C forward-only=true" in f for f in faster)
    assert block[-len(faster) :] == faster  # after the estimate, fastest first
    ranges = [re.search(r": ([\d.]+)-[\d.]+ (min|h)$", line) for line in faster]
    lows = [float(r[1]) * (60 if r[2] == "h" else 1) for r in ranges]
    assert lows == sorted(lows), faster


# The recorded builds (bench/results/: each build's wall time and the sources it compiled, as
# bench/estimate_check.py reads them for docs/benchmarks.md, "Estimates"): the estimate's printed
# range (0.7-1.3 x the estimate) holds every one of them.
def _recorded():
    spec = importlib.util.spec_from_file_location("estimate_check", ESTIMATE_CHECK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.recorded()


def test_every_recorded_build_falls_in_the_printed_range():
    rows = _recorded()
    assert len(rows) == 14
    for build, machine, sources, m, disabled, wall in rows:
        estimate = _schedule.predict(sources, m, _costs.model(disabled))
        low, high = (estimate * f for f in _schedule.RANGE)
        assert low <= wall <= high, (build, machine, round(estimate), wall)


def test_the_2_core_boxs_tailored_build_is_estimated_from_its_plan(sample_sdist_dir):
    """What a user of the CI box sees before the build bench/results/2026-11-22-ccache recorded:
    flash-attn 2.8.3's forward bf16 hdim-128 set for sm_80, unsplit, 2 jobs on 2 cores, which
    took 505.6 s with a cold compiler cache."""
    measured = json.loads((RESULTS / "2026-11-22-ccache" / "ccache-cold.json").read_text())
    assert measured["exit"] == 0
    plan = fa2_plan(SHARED_SDISTS, "2.8.3", head_dims="128", dtypes="bf16", forward_only="true")
    sm80 = ArchChoice(Selection(("80",), "setting cuda-archs"), ("80",), (), {})
    tools = Tools(None, sm80, jobs=2, nvcc_threads=1, compiler_cache=None, shape={"tu_parts": 1})
    sources = plan.flavour.planned_sources(plan, tools)
    assert sorted(sources) == sorted([*TAILORED_SM80, "flash_api.cpp"])
    preview = _progress.preview(plan, tools, sources, cores=2, load=0.0)
    low, high = (preview.seconds * f for f in _schedule.RANGE)
    assert low <= measured["wall_s"] <= high, (preview.seconds, measured["wall_s"])
    assert f"  estimate: {_schedule.time_range(preview.seconds)}" in "\n".join(preview.lines)


def test_a_flavour_without_a_cost_model_says_so_and_progress_counts_sources(
    sample_sdist_dir, demo_flavour
):
    sdist = sample_sdist_dir / f"flash_attn-{SAMPLE_VERSION}.tar.gz"
    plan = planned(demo_flavour, {"demo-sdist": str(sdist)})
    tools = Tools(nvcc=None, archs=None, jobs=1, nvcc_threads=None, compiler_cache=None)
    preview = _progress.preview(plan, tools, ["flash_api.cpp"], cores=4, load=0.0)
    assert preview.seconds is None and preview.cost is _schedule.uniform
    assert list(preview.lines) == [
        "about to compile 1 source(s) x 1 architecture (kernel set sample)",
        "  jobs: 1 compile job(s) x 1 nvcc thread(s) on 4 core(s)",
        "  estimate: none for fa-shim-demo (fa-shim has no cost model for its sources)",
    ]
