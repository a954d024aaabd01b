"""FlashAttention-3 v2.8.3 compiled as the per-head-dim files its aggregates include (issue 24)
has the aggregate build's kernels: the real nvcc 13.0 for sm_90a, under the CUDA 13.0 torch
2.11 venv, the build's own command line.

The smallest honest case: bf16, head dim 128, forward only, every feature switch off. Upstream's
setup.py compiles it as two aggregates, `flash_fwd_hdimall_bf16_sm90.cu` (its head dim 128 file
and four files compiled away by the DISABLE switches) and `flash_fwd_hdimdiff_bf16_sm90.cu`
(three head-dim pairs, all compiled away); fa-shim's build compiles the one file with kernels,
`flash_fwd_hdim128_bf16_sm90.cu`. `python -m fa_backend prepare` writes the build's build.ninja;
both aggregates are compiled with the build's command for that file (the same rule and flags:
setup.py gives every kernel file of the extension the same ones) and the kernels of the objects
compared by `nm`. About 2 CPU-minutes; the GPU run is upstream's tests (docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FA3_SHARED, REPO, prepared_set
from kernel_symbols import command_for, compile_all, kernels

pytestmark = [pytest.mark.slow, pytest.mark.realbuild]

FEATURES = "fp8,split,paged-kv,appendkv,local,softcap,packgqa,varlen,cluster"
SET = {
    "fa3-release": "v2.8.3",  # the line with aggregates (under torch >= 2.9 auto is the stable one)
    "head-dims": "128",
    "dtypes": "bf16",
    "forward-only": "true",
    "disable": FEATURES,
    "cuda-archs": "90a",
    "compiler-cache": "none",
}
PER_HEAD_DIM = "flash_fwd_hdim128_bf16_sm90.cu"
AGGREGATES = ("flash_fwd_hdimall_bf16_sm90.cu", "flash_fwd_hdimdiff_bf16_sm90.cu")


@pytest.fixture(scope="module")
def prepared(torch211_python, fa3_tarballs, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("fa3-units")
    settings = {**SET, "fa3-source-dir": str(FA3_SHARED)}
    return prepared_set(torch211_python, tmp, settings, project=REPO / "flash-attn-3")


def test_the_build_compiles_the_per_head_dim_file_not_the_aggregates(prepared):
    names = [Path(c["file"]).name for c in prepared["compile_commands"]]
    assert sorted(names) == sorted([PER_HEAD_DIM, "flash_api.cpp", "flash_prepare_scheduler.cu"])
    # the same set and wheel as before the split: the label names the set, not the units
    assert ".hdim128.bf16.fwd.nosplit." in prepared["wheel"]


def test_the_per_head_dim_units_have_the_aggregates_kernels(prepared, tmp_path):
    (command,) = [
        c["args"] for c in prepared["compile_commands"] if c["file"].endswith(PER_HEAD_DIM)
    ]
    source = Path(prepared["source"]) / "instantiations"
    objects = {name: tmp_path / f"{name}.o" for name in (PER_HEAD_DIM, *AGGREGATES)}
    compile_all([command_for(command, source / name, obj) for name, obj in objects.items()])
    split = kernels(objects[PER_HEAD_DIM])
    aggregated = kernels(objects[AGGREGATES[0]]) | kernels(objects[AGGREGATES[1]])
    assert split and all("FlashAttnFwdSm90" in k for k in split)
    assert split == aggregated
    assert not kernels(objects[AGGREGATES[1]])  # the pairs' file: compiled away by the set
