"""The part files -C tu-parts writes into the real 2.8.3 source, patched by GNU patch with the
vendored 30-tu-parts.patch as a build does: each part includes its source with the patch's
macros, under names of its own. How many parts, and the check that none goes missing:
tests/unit/flavours/fa2/test_tu_parts.py."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from conftest import SHARED_SDISTS

from fa_backend.flavours.fa2 import _releases, _tu_parts
from fa_backend.sources import _patches

SPLIT = "flash_fwd_split_hdim128_bf16_sm80"


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("src")
    with tarfile.open(SHARED_SDISTS / "flash_attn-2.8.3.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    source = dest / "flash_attn-2.8.3"
    _patches.apply_all(_releases.patches("2.8.3"), source)
    return source / _tu_parts.KERNEL_DIR


def test_part_files_include_the_source_with_the_patchs_macros(kernel_dir):
    split = _tu_parts.write(kernel_dir, 3)
    assert len(split) == 72  # fwd, split-KV and bwd x 6 head dims x 2 dtypes x causal or not
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
