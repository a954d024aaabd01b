"""nvcc compiles one file into the same object twice when fa-shim's launcher runs it as in a
build (docs/reproducibility.md): a unit of explicit template instantiations only, as
flash-attn's kernel files are, whose internal-linkage device entities cudafe++ names after a
random number unless the launcher gives the unit its --frandom-seed; and nvcc's -lineinfo
tables, which record each source file's modification time, settled by
pipeline/_reproducible.settle_times. The real nvcc 13.0; no GPU. Each half is also shown to
differ without fa-shim's part (so the test can fail)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fa_backend.pipeline import _reproducible
from fa_backend.resources import LAUNCHER
from fa_backend.resources.launcher import KEEP_ENV, SEED_ENV
from fa_backend.toolchain import _compilers

# like flash_fwd_hdim128_bf16_sm90.cu: no function of its own, an instantiation only
UNIT = """\
namespace { __device__ unsigned int calls; }
template <int N> __global__ void scale(float* x) { x[threadIdx.x] *= N; atomicAdd(&calls, 1u); }
template __global__ void scale<2>(float*);
"""


def _nvcc() -> Path:
    found = shutil.which("nvcc") or "/usr/local/cuda-13.0/bin/nvcc"
    if not Path(found).is_file():
        pytest.skip("no nvcc here")
    return Path(found)


def _compile(tmp_path: Path, env: dict, *flags: str) -> bytes:
    """The object of tmp_path/src/unit.cu, compiled through the launcher at one output path."""
    out = tmp_path / "build" / "unit.o"
    out.parent.mkdir(exist_ok=True)
    out.unlink(missing_ok=True)
    command = [str(_nvcc()), "-c", str(tmp_path / "src" / "unit.cu"), "-o", str(out)]
    command += ["-gencode", "arch=compute_90,code=sm_90", *flags]
    subprocess.run(
        [sys.executable, str(LAUNCHER), str(tmp_path / "stats.jsonl"), *command],
        env={**os.environ, KEEP_ENV: "1", **env},
        check=True,
        capture_output=True,
    )
    return out.read_bytes()


@pytest.fixture
def unit(tmp_path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "unit.cu").write_text(UNIT)
    return tmp_path


def test_a_seed_per_unit_names_its_internal_entities_the_same_each_compile(unit):
    assert _compilers.nvcc_takes_random_seed(_nvcc())
    seeded = [_compile(unit, {SEED_ENV: "1"}) for _ in range(2)]
    assert seeded[0] == seeded[1]
    unseeded = [_compile(unit, {}) for _ in range(2)]
    assert unseeded[0] != unseeded[1]  # cudafe++'s random module id: what the seed fixes
    records = (unit / "stats.jsonl").read_text()
    assert '"source": "unit.cu"' in records and "frandom" not in records  # the unit's name


def test_settled_times_keep_the_line_tables_the_same(unit):
    source = unit / "src" / "unit.cu"
    objects = []
    for mtime in (1_000_000_000, 1_500_000_000):  # extracted or patched at different times
        os.utime(source, (mtime, mtime))
        objects.append(_compile(unit, {SEED_ENV: "1"}, "-lineinfo"))
    assert objects[0] != objects[1]  # nvcc records the file's time
    settled = []
    for mtime in (1_000_000_000, 1_500_000_000):
        os.utime(source, (mtime, mtime))
        _reproducible.settle_times(unit / "src")
        settled.append(_compile(unit, {SEED_ENV: "1"}, "-lineinfo"))
    assert settled[0] == settled[1]
    assert source.stat().st_mtime == _reproducible.SOURCE_TIME
