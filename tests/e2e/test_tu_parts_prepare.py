"""Forward kernel sources compiled as parts, prepared for real under the CUDA 13.0 torch 2.11
venv (the session's): the build description torch writes for them, and the default parts
following the max-jobs setting. The parts' kernels compiling, linking and importing is
tests/e2e/test_real_build.py's build (split)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import INFERENCE_KERNELS
from test_kernels_prepare import _basenames, prepare

from fa_backend.flavours.fa2 import _tu_parts


@pytest.mark.slow
def test_prepare_compiles_the_parts_instead_of_the_sources(torch211_python, tmp_path):
    summary = prepare(
        torch211_python,
        tmp_path / "b",  # a new directory: tmp_path holds the test's cache
        *("head-dims=128", "dtypes=bf16", "forward-only=true", "tu-parts=3", "max-jobs=16"),
    )
    assert _basenames(summary, "nvcc") == sorted(
        p for k in INFERENCE_KERNELS for p in _tu_parts.part_names(k, 3)
    )
    assert _basenames(summary, "cxx") == ["flash_api.cpp"]
    prov = summary["provenance"]
    assert prov["tu_parts"] == 3 and prov["compile_commands"] == {"cxx": 1, "nvcc": 16}
    assert "30-tu-parts.patch" in [p["name"] for p in prov["patches"]]
    # the same wheel name as unsplit: the parts change how objects are cut, not a kernel
    assert ".hdim128.bf16.fwd-" in summary["wheel"]
    # ninja starts edges in file order: the kernel parts first, the light files after, longest
    # first by the cost model (flash_api.cpp, part 0 of split-KV sources with the combine kernels)
    built = [
        line.split(":", 1)[0].rsplit("/", 1)[-1]
        for line in Path(summary["ninja_file"]).read_text().splitlines()
        if line.startswith("build ") and line.endswith((".cu", ".cpp"))
    ]
    assert len(built) == 17
    assert all(re.search(r"\.part[1-3]of3\.o$", b) for b in built[:12])
    assert built[12] == "flash_api.o"
    assert all(b.startswith("flash_fwd_split_") for b in built[13:15])


@pytest.mark.slow
def test_the_default_parts_follow_the_max_jobs_setting(torch211_python, tmp_path):
    """8 jobs for the 4-source inference set: 2 parts each, whatever this machine's cores."""
    summary = prepare(
        torch211_python,
        tmp_path / "b",
        *("head-dims=128", "dtypes=bf16", "forward-only=true", "max-jobs=8"),
    )
    assert summary["provenance"]["tu_parts"] == 2
