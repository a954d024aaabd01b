"""Forward kernel sources compiled as parts (-C tu-parts, vendored 30-tu-parts.patch): how many
parts, the part files written into the real patched 2.8.3 source, the build description torch
writes for them, and the check that no part goes missing. The parts' kernels compiling, linking
and importing is tests/test_real_build.py's build (split); computing right, the GPU run's
(docs/benchmarks.md)."""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path

import pytest
from conftest import SHARED_SDISTS
from test_kernels import INFERENCE, INFERENCE_KERNELS, _basenames, prepare, tailor

from fa_backend.core._errors import FaShimError
from fa_backend.flavours.fa2 import _kernels, _tu_parts
from fa_backend.pipeline import _patches
from fa_backend.pipeline._compile_commands import Command
from fa_backend.settings._settings import Settings

TORCH211 = os.environ.get("TORCH211_PYTHON")
SPLIT = "flash_fwd_split_hdim128_bf16_sm80"


def test_parts_fill_the_idle_jobs():
    four = sorted(INFERENCE_KERNELS)
    assert _tu_parts.choose(None, 16, four, True) == 4  # the tailored set on 16 cores
    assert _tu_parts.choose(None, 2, four, True) == 1  # a 2-core box: nothing idle
    assert _tu_parts.choose(None, 64, four, True) == _tu_parts.MAX_PARTS
    assert _tu_parts.choose(None, 16, [f"k{i}.cu" for i in range(72)], True) == 1  # full set
    assert _tu_parts.choose(3, 2, four, True) == 3  # the setting decides
    assert _tu_parts.choose(4, 16, four, False) == 1  # no patch for this version: never


def test_sources_counted_with_their_parts():
    kernels = [*sorted(INFERENCE_KERNELS), "flash_bwd_hdim128_bf16_sm80.cu"]
    assert _tu_parts.count_sources(kernels, 1) == 5
    assert _tu_parts.count_sources(kernels, 4) == 4 * 5 + 1  # backward sources are not split


def _commands(names):
    return [Command("cxx", "/s/flash_api.cpp", ())] + [
        Command("nvcc", f"/s/{n}", ()) for n in names
    ]


def test_a_split_build_must_compile_every_part():
    t = tailor(**INFERENCE)
    parts = [p for k in sorted(INFERENCE_KERNELS) for p in _tu_parts.part_names(k, 2)]
    _kernels.check_sources(_commands(parts), t, "2.8.3")
    lost = [p for p in parts if p != f"{SPLIT}.part2of2.cu"]
    with pytest.raises(FaShimError) as exc:  # its kernels would be undefined symbols at import
        _kernels.check_sources(_commands(lost), t, "2.8.3")
    assert f"incomplete parts: {SPLIT}.cu: parts [(0, 2), (1, 2)]" in exc.value.details
    full = _kernels.tailoring(Settings(), "2.8.3")
    with pytest.raises(FaShimError):  # a full build is held to the same rule
        _kernels.check_sources(_commands(lost), full, "2.8.3")


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("src")
    with tarfile.open(SHARED_SDISTS / "flash_attn-2.8.3.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    source = dest / "flash_attn-2.8.3"
    _patches.apply_all(_patches.patches_for("2.8.3"), source)
    return source / _tu_parts.KERNEL_DIR


def test_part_files_include_the_source_with_the_patchs_macros(kernel_dir):
    split = _tu_parts.write(kernel_dir, 3)
    assert len(split) == 48  # fwd and split-KV x 6 head dims x 2 dtypes x causal or not
    assert all(_tu_parts.splittable(name) for name in split)
    assert split[f"{SPLIT}.cu"] == [f"{SPLIT}.part{k}of3.cu" for k in range(4)]
    part0 = (kernel_dir / f"{SPLIT}.part0of3.cu").read_text()
    assert "#define FA_SHIM_TU_PARTS 3\n#define FA_SHIM_TU_PART 0\n" in part0
    assert f'#include "{SPLIT}.cu"' in part0 and "fa_shim_part" not in part0
    part2 = (kernel_dir / f"{SPLIT}.part2of3.cu").read_text()
    # the source's explicit instantiation again, under a name of its own: no duplicate symbol
    assert (
        "#define run_mha_fwd_splitkv_dispatch fa_shim_part2_run_mha_fwd_splitkv_dispatch" in part2
    )
    launch = (kernel_dir / "flash_fwd_launch_template.h").read_text()
    assert launch.count("if constexpr (fa_shim_tu_part<") == 2  # fwd and split-KV launchers
    assert _tu_parts.write(kernel_dir, 1) == {}


@pytest.fixture(scope="module")
def t211(request) -> Path:
    return Path(TORCH211) if TORCH211 else request.getfixturevalue("torch211_python")


@pytest.mark.slow
def test_prepare_compiles_the_parts_instead_of_the_sources(t211, tmp_path):
    summary = prepare(
        t211, tmp_path / "b", "head-dims=128", "dtypes=bf16", "forward-only=true", "tu-parts=3"
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
    # ninja starts edges in file order: the kernel parts first, the light files after (part 0
    # of split-KV sources, with the combine kernels, before the rest)
    built = [
        line.split(":", 1)[0].rsplit("/", 1)[-1]
        for line in Path(summary["ninja_file"]).read_text().splitlines()
        if line.startswith("build ") and line.endswith((".cu", ".cpp"))
    ]
    assert len(built) == 17
    assert all(re.search(r"\.part[1-3]of3\.o$", b) for b in built[:12])
    assert all(b.startswith("flash_fwd_split_") for b in built[12:14])


@pytest.mark.slow
def test_the_default_parts_follow_the_max_jobs_setting(t211, tmp_path):
    """8 jobs for the 4-source inference set: 2 parts each, whatever this machine's cores."""
    summary = prepare(
        t211, tmp_path / "b", "head-dims=128", "dtypes=bf16", "forward-only=true", "max-jobs=8"
    )
    assert summary["provenance"]["tu_parts"] == 2
