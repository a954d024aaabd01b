"""The vendored dispatch patch on the real 2.8.3 and 2.8.3.post2 sdists, applied by GNU patch as a
build does: it keeps upstream's expansion untailored, and a program linked at -O0 from the
patched switches (g++, this interpreter's torch headers, CUDA 13.0 headers) references exactly
the kernels a tailored set keeps. The kernel-set model: tests/unit/flavours/fa2/
test_fa2_kernels.py; real prepares under a CUDA torch: tests/e2e/test_kernels_prepare.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import SHARED_SDISTS, run, tailor

from fa_backend.flavours.fa2 import _releases
from fa_backend.sources import _patches

CUDA_INCLUDE = Path("/usr/local/cuda-13.0/include")


@pytest.fixture(scope="module", params=["2.8.3", "2.8.3.post2"])
def patched_source(request, tmp_path_factory) -> Path:
    """The real sdist, extracted and patched exactly as a build does."""
    version = request.param
    dest = tmp_path_factory.mktemp(f"src-{version}")
    with tarfile.open(SHARED_SDISTS / f"flash_attn-{version}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    source = dest / f"flash_attn-{version}"
    _patches.apply_all(_releases.patches(version), source)
    return source


def test_patch_applies_and_keeps_upstream_expansion(patched_source):
    switch = (patched_source / "csrc/flash_attn/src/static_switch.h").read_text()
    # untailored, the dispatch macro is upstream's statement
    assert "#else\n  #define FA_SHIM_DISPATCH(BUILT, MISSING, ...) return __VA_ARGS__();" in switch
    assert switch.count("FA_SHIM_DISPATCH(fa_shim::has_head_dim(kHeadDim)") == 6
    api = (patched_source / "csrc/flash_attn/flash_api.cpp").read_text()
    assert '#include "fa_shim_kernel_set.h"' in api
    assert api.count("fa_shim::backward_message()") == 3  # mha_bwd, mha_varlen_bwd, run_mha_bwd


DISPATCH_TU = r"""
#include <cstdio>
#include <cutlass/numeric_types.h>
#include "static_switch.h"
#include "fa_shim_kernel_set.h"
// Declared for every case like flash.h; defined only for the kept ones, like the kept .cu files.
template <typename T, int D, bool C> void run_kernel(int &out);
%(definitions)s
int dispatch(bool fp16, int d, bool causal) {
  int out = -1;
  FP16_SWITCH(fp16, [&] { HEADDIM_SWITCH(d, [&] { BOOL_SWITCH(causal, C, [&] {
    run_kernel<elem_type, kHeadDim, C>(out); }); }); });
  return out;
}
int main(int argc, char **argv) {
  std::printf("SET %%s\n", fa_shim::kernel_set().c_str());
  std::printf("FEATURE %%s\n", fa_shim::feature_message("dropout", "dropout").c_str());
  for (int i = 1; i < argc; ++i) {
    int fp16 = 0, d = 0, causal = 0;
    std::sscanf(argv[i], "%%d:%%d:%%d", &fp16, &d, &causal);
    try { std::printf("OK %%d\n", dispatch(fp16, d, causal)); }
    catch (const c10::Error &e) { std::printf("ERROR %%s\n", e.what_without_backtrace()); }
  }
}
"""


def _host_torch() -> Path | None:
    try:
        import torch
    except ImportError:
        return None
    return Path(torch.__file__).parent


def build_dispatch_program(source: Path, out: Path, defines, kept) -> subprocess.CompletedProcess:
    torch_dir = _host_torch()
    definitions = "\n".join(
        f"template <> void run_kernel<cutlass::{dt}, {d}, {c}>(int &out) {{ out = {d}; }}"
        for dt, d in kept
        for c in ("true", "false")
    )
    tu = out.with_suffix(".cpp")
    tu.write_text(DISPATCH_TU % {"definitions": definitions})
    return run(
        [
            os.environ.get("CXX", "g++"),
            "-std=c++17",
            "-O0",  # no optimizer to hide a reference: only the dispatch patch may omit them
            "-w",
            *defines,
            f"-I{source / 'csrc/flash_attn/src'}",
            f"-I{source / 'csrc/cutlass/include'}",
            f"-I{CUDA_INCLUDE}",
            f"-I{torch_dir / 'include'}",
            tu,
            "-o",
            out,
            f"-L{torch_dir / 'lib'}",
            "-lc10",
            f"-Wl,-rpath,{torch_dir / 'lib'}",
        ],
        check=False,
    )


needs_headers = pytest.mark.skipif(
    not CUDA_INCLUDE.is_dir() or _host_torch() is None or not shutil.which("g++"),
    reason="needs g++, torch headers in this interpreter and CUDA 13.0 headers",
)


@needs_headers
def test_dispatch_raises_for_left_out_kernels_and_links_without_them(patched_source, tmp_path):
    """The patched switches, linked into a program at -O0 that defines only the kept kernels:
    linking proves nothing references a left-out one; running shows the errors users get."""
    t = tailor(head_dims=("128",), dtypes=("bf16",), forward_only=True, disable=("alibi",))
    program = tmp_path / "dispatch"
    proc = build_dispatch_program(patched_source, program, t.defines, [("bfloat16_t", 128)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = run([program, "0:128:1", "0:128:0", "0:64:0", "0:40:1", "1:128:0"]).stdout.splitlines()
    assert lines[0] == f"SET {t.kernel_set}"  # C++ and Python name the set alike
    assert lines[1] == (
        "FEATURE flash-attn was built by fa-shim without dropout (kernel set "
        "hdim128.bf16.fwd.noalibi); rebuild it with -C disable=alibi."
    )
    assert lines[2:4] == ["OK 128", "OK 128"]
    assert lines[4] == (
        "ERROR flash-attn was built by fa-shim without head dim 64 (kernel set "
        "hdim128.bf16.fwd.noalibi); rebuild it with -C head-dims=64,128 (or without head-dims, "
        "for all head dims)."
    )
    assert "without the head dim 64 kernels, which serve head dim 40" in lines[5]
    assert lines[6].startswith("ERROR flash-attn was built by fa-shim without dtype fp16")


@needs_headers
def test_untailored_dispatch_references_every_kernel(patched_source, tmp_path):
    """The control: without the defines the same program cannot link, so the test above is
    proving the patch, not a compiler that happens to drop unused branches."""
    proc = build_dispatch_program(patched_source, tmp_path / "d", [], [("bfloat16_t", 128)])
    assert proc.returncode != 0
    missing = set(re.findall(r"undefined reference to `void run_kernel<([^`]+)>", proc.stderr))
    assert len(missing) == 22  # 2 dtypes x 6 head dims x causal/not, minus the 2 defined
