"""FA2's kernel sources include only the torch struct they use (vendored 40-kernel-headers.patch:
flash.h takes at::PhiloxCudaState from ATen/cuda/PhiloxCudaState.h, not from
ATen/cuda/CUDAGeneratorImpl.h, whose ATen/Context.h every kernel source parsed): the build reads
fewer headers and compiles the same machine code. The real nvcc 13.0 for sm_80, the CUDA 13.0
torch 2.11 venv, the build's own command line (`python -m fa_backend prepare`).

One kernel source of the smallest set (head dim 32, bf16, forward only, the five DISABLE
switches) is compiled to a cubin twice: in the prepared tree, and in a copy of it holding
upstream's flash.h; every kernel's machine code is the same, byte for byte. The time it saves is
a benchmark (docs/benchmarks.md), not asserted here. About 2 CPU-minutes."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import SHARED_SDISTS, prepared_set
from kernel_symbols import command_for, compile_all, cubin_command, kernel_code

from fa_backend.flavours.fa2 import _tu_parts

pytestmark = [pytest.mark.slow, pytest.mark.realbuild]

SET = {
    "head-dims": "32",
    "dtypes": "bf16",
    "forward-only": "true",
    "disable": "dropout,alibi,softcap,local,uneven_k",
    "cuda-archs": "80",
    "tu-parts": "1",
    "compiler-cache": "none",
}
SOURCE = "flash_fwd_hdim32_bf16_sm80.cu"


@pytest.fixture(scope="module")
def prepared(torch211_python, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("fa2-headers")
    return prepared_set(torch211_python, tmp, {**SET, "sdist-dir": str(SHARED_SDISTS)})


@pytest.fixture(scope="module")
def kernel_dirs(prepared, tmp_path_factory) -> dict[str, Path]:
    """The prepared kernel directory, and a copy of it with upstream's flash.h."""
    patched = Path(prepared["source"]) / _tu_parts.KERNEL_DIR
    upstream = tmp_path_factory.mktemp("upstream-headers") / "src"
    shutil.copytree(patched, upstream)
    with tarfile.open(SHARED_SDISTS / "flash_attn-2.8.3.tar.gz") as tar:
        flash_h = tar.extractfile("flash_attn-2.8.3/csrc/flash_attn/src/flash.h")
        (upstream / "flash.h").write_bytes(flash_h.read())
    assert (upstream / "flash.h").read_bytes() != (patched / "flash.h").read_bytes()
    return {"patched": patched, "upstream": upstream}


def _command(prepared) -> list[str]:
    return next(c["args"] for c in prepared["compile_commands"] if c["file"].endswith(SOURCE))


def test_the_kernels_machine_code_is_upstreams(prepared, kernel_dirs, tmp_path):
    cubins = {name: tmp_path / f"{name}.cubin" for name in kernel_dirs}
    compile_all(
        [cubin_command(_command(prepared), d / SOURCE, cubins[n]) for n, d in kernel_dirs.items()]
    )
    patched, upstream = kernel_code(cubins["patched"]), kernel_code(cubins["upstream"])
    assert len(upstream) >= 2, sorted(upstream)  # the source's kernels, found by name
    assert sorted(patched) == sorted(upstream)
    assert all(patched[k] == upstream[k] for k in upstream)


def test_the_kernel_sources_no_longer_read_aten_context(prepared, kernel_dirs, tmp_path):
    """nvcc -M lists the headers a compile reads."""
    headers = {}
    for name, kernel_dir in kernel_dirs.items():
        args = command_for(_command(prepared), kernel_dir / SOURCE, tmp_path / "x.o")
        i = args.index("-o")
        args = [a for a in args[:i] + args[i + 2 :] if a != "-c"] + ["-M"]
        headers[name] = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    assert "ATen/Context.h" in headers["upstream"]
    assert "ATen/Context.h" not in headers["patched"]
    assert "ATen/cuda/PhiloxCudaState.h" in headers["patched"]
