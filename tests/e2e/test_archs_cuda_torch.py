"""Architectures through the CUDA 13.0 torch 2.11 venv (the session's): the archs torch was
compiled for, and a real prepare of the 2.8.3 sdist mapping an Ampere GPU's arch onto sm_80."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import REPO, SHARED_SDISTS, run

from fa_backend.toolchain import _archs, _torch
from fa_backend.toolchain._archs import parse_arch_list
from fa_backend.toolchain._compile_commands import Command

NVCC13 = Path("/usr/local/cuda-13.0/bin/nvcc")


@pytest.mark.slow
def test_torch_probe_reports_the_archs_torch_was_compiled_for(torch211_python):
    info = _torch.probe(torch211_python)
    # this machine has no GPU; torch 2.11 cu130 still reports the archs it was compiled for
    assert {"80", "90", "100", "120"} <= set(parse_arch_list(" ".join(info.arch_list)))


def prepare(python: Path, build_dir: Path, *options: str, env=None) -> dict:
    args = [python, "-m", "fa_backend", "prepare", "--build-dir", build_dir]
    args += ["-C", f"sdist-dir={SHARED_SDISTS}"]
    for option in options:
        args += ["-C", option]
    proc = run(args, cwd=REPO, env=env)
    return json.loads(proc.stdout)


@pytest.mark.slow
@pytest.mark.skipif(not NVCC13.exists(), reason="needs CUDA 13.0 at /usr/local/cuda-13.0")
def test_prepare_maps_an_ampere_gpu_arch_onto_sm80(torch211_python, tmp_path):
    """cuda-archs=86 through upstream 2.8.3 (FLASH_ATTN_CUDA_ARCHS=86 alone compiles nothing)."""
    env = {**os.environ, "CUDA_HOME": "/usr/local/cuda-13.0"}
    summary = prepare(torch211_python, tmp_path / "b", "cuda-archs=86", env=env)  # a new dir
    nvcc = [c for c in summary["compile_commands"] if c["kind"] == "nvcc"]
    assert len(nvcc) == 72
    for c in nvcc:
        assert _archs.gencodes(Command("nvcc", c["file"], tuple(c["args"]))) == {"compute_80:sm_80"}
    assert summary["provenance"]["cuda_archs"] == ["80"]
