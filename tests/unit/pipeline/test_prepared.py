"""The prepare step's result (fa_backend/pipeline/_compile_plan.Prepared), which the compile
step takes: its launcher records sit beside the source tree, where the upstream run's scratch is
(FA2: the sdist's directory; FA3: beside hopper/ in the layout)."""

from __future__ import annotations

from fa_backend.flavours._interface import Tools
from fa_backend.pipeline import _stats
from fa_backend.pipeline._compile_plan import Prepared
from fa_backend.toolchain._compile_commands import Command

TOOLS = Tools(nvcc=None, archs=None, jobs=2, nvcc_threads=None, compiler_cache=None)


def _prepared(source) -> Prepared:
    command = Command("cxx", "csrc/flash_api.cpp", ("c++", "-c", "csrc/flash_api.cpp"))
    return Prepared(source, TOOLS, source / "build.ninja", [command], {"extensions": []}, source)


def test_the_stats_file_is_in_the_scratch_beside_the_source(tmp_path):
    fa2 = _prepared(tmp_path / "scratch" / "flash_attn-2.8.3")
    assert fa2.stats_file == _stats.stats_file(tmp_path / "scratch")
    fa3 = _prepared(tmp_path / "layout" / "hopper")
    assert fa3.stats_file == tmp_path / "layout" / _stats.STATS_FILE


def test_prepared_keeps_what_the_compile_step_needs(tmp_path):
    prepared = _prepared(tmp_path / "src")
    assert prepared.tools is TOOLS and prepared.ninja_file == tmp_path / "src" / "build.ninja"
    assert [c.kind for c in prepared.commands] == ["cxx"]
    prepared.report["extensions"].append({"name": "flash_attn_2_cuda"})  # the driver's report
    assert prepared.report == {"extensions": [{"name": "flash_attn_2_cuda"}]}
