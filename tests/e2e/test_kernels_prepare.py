"""Tailored kernel sets prepared for real (`python -m fa_backend prepare`, nothing compiled but
what a test compiles itself) from the 2.8.3 sdists under the CUDA 13.0 torch 2.11 venv (the
session's): the build description of a tailored and of the full set, kernel files that
preprocess exactly as upstream's, and a tailored flash_api.cpp whose object references only
the kept kernels. The kernel-set model: tests/unit/flavours/fa2/test_fa2_kernels.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import INFERENCE, INFERENCE_KERNELS, REPO, SHARED_SDISTS, run, upstream_kernel_tree

from fa_backend.flavours.fa2 import _kernels
from fa_backend.settings._settings import Settings

CUDA_INCLUDE = Path("/usr/local/cuda-13.0/include")
BASE_LABEL = "cu130torch2.11cxx11abiTRUE"


def prepare(python: Path, build_dir: Path, *options: str) -> dict:
    args = [python, "-m", "fa_backend", "prepare", "--build-dir", build_dir]
    for option in ("sdist-dir=" + str(SHARED_SDISTS), "cuda-archs=90", *options):
        args += ["-C", option]
    env = {**os.environ, "CUDA_HOME": "/usr/local/cuda-13.0"}
    return json.loads(run(args, cwd=REPO, env=env).stdout)


def _basenames(summary, kind):
    return sorted(
        c["file"].rsplit("/", 1)[-1] for c in summary["compile_commands"] if c["kind"] == kind
    )


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2.8.3", "2.8.3.post2"])
def test_prepare_tailored_build_description(torch211_python, tmp_path, version):
    summary = prepare(
        torch211_python,
        tmp_path / "b",  # a new directory: tmp_path holds the test's cache
        f"flash-attn-version={version}",
        "head-dims=128",
        "dtypes=bf16",
        "forward-only=true",
        "disable=dropout",
    )
    assert summary["wheel"].startswith(
        f"flash_attn-{version}+{BASE_LABEL}.hdim128.bf16.fwd.nodropout-"
    )
    assert _basenames(summary, "nvcc") == sorted(INFERENCE_KERNELS)
    assert _basenames(summary, "cxx") == ["flash_api.cpp"]
    defines = [*_kernels.tailoring(Settings(**INFERENCE, disable=("dropout",)), version).defines]
    for c in summary["compile_commands"]:
        args = c["args"]
        assert [a for a in args if a.startswith(("-DFA_SHIM", "-DFLASHATTENTION"))] == defines
        # the defines come before fa-shim's -std/ABI flags, which stay last
        assert args.index(defines[-1]) < args.index("-D_GLIBCXX_USE_CXX11_ABI=1")
    prov = summary["provenance"]
    assert prov["kernel_set"]["kernel_set"] == "hdim128.bf16.fwd.nodropout"
    assert prov["compile_commands"] == {"cxx": 1, "nvcc": 4}
    assert "20-kernel-set-dispatch.patch" in [p["name"] for p in prov["patches"]]


@pytest.mark.slow
def test_prepare_untailored_is_upstreams_build(torch211_python, tmp_path):
    summary = prepare(torch211_python, tmp_path / "b")  # a new directory: tmp_path holds the cache
    assert len(_basenames(summary, "nvcc")) == 72
    assert not any("FA_SHIM" in a for c in summary["compile_commands"] for a in c["args"])
    assert summary["provenance"]["kernel_set"]["kernel_set"] == "full"
    assert f"+{BASE_LABEL}-" in summary["wheel"]


def preprocess(args: list[str], out: Path) -> str:
    """nvcc -E of a compile command; line markers and blank lines dropped (a patch's inactive
    #if block leaves blank lines where it was), the source root's path and the __LINE__ of the
    CUDA error checks neutralised (a patch's lines shift them)."""
    args = list(args)
    for flag in ("-MF", "-o"):
        del args[args.index(flag) : args.index(flag) + 2]
    args = [a for a in args if a not in ("-MD", "-c")] + ["-E", "-o", str(out)]
    subprocess.run(args, capture_output=True, text=True, check=True)
    code = "\n".join(
        line for line in out.read_text().splitlines() if line.strip() and not line.startswith("#")
    )
    return re.sub(r"__func__, static_cast<uint32_t>\(\d+\)", "__func__, __LINE__", code)


@pytest.mark.slow
def test_kernel_files_preprocess_exactly_as_upstream(torch211_python, tmp_path):
    """The patch and the tailoring defines change no kernel: the kept kernel files of a tailored
    build preprocess to the same code as in the pristine sdist with upstream's flags (unsplit:
    the tu-parts patch is inert too; the pristine tree with the kernel headers patch, which
    changes what they read: conftest's upstream_kernel_tree)."""
    summary = prepare(
        torch211_python,
        tmp_path / "b",
        "head-dims=128",
        "dtypes=bf16",
        "forward-only=true",
        "tu-parts=1",
    )
    source = Path(summary["source"])
    pristine = upstream_kernel_tree(tmp_path / "u")
    checked = 0
    for c in summary["compile_commands"]:
        if not c["file"].endswith(
            ("fwd_hdim128_bf16_causal_sm80.cu", "split_hdim128_bf16_sm80.cu")
        ):
            continue
        # fa-shim's prefix maps only rename paths (docs/reproducibility.md): compared without
        args = [a for a in c["args"] if "-prefix-map=" not in a]
        tailored = preprocess(args, tmp_path / "t.ii").replace(str(source), "<src>")
        upstream_args = [a.replace(str(source), str(pristine)) for a in args if "FA_SHIM" not in a]
        upstream = preprocess(upstream_args, tmp_path / "u.ii").replace(str(pristine), "<src>")
        assert tailored == upstream, c["file"]
        checked += 1
    assert checked == 2


# The kernels flash_api.o references, from their mangled names:
# _ZN5flash12run_mha_fwd_IN7cutlass10bfloat16_tELi128ELb1EEEvRNS_16Flash_fwd_paramsEP11CUstream_st
KERNEL_SYMBOL = re.compile(
    r"(run_mha_fwd_|run_mha_fwd_splitkv_dispatch|run_mha_bwd_)IN7cutlass\d+(half_t|bfloat16_t)"
    r"ELi(\d+)ELb([01])E"
)


def kernel_references(obj: Path) -> set[tuple[str, str, int, bool]]:
    from elftools.elf.elffile import ELFFile

    refs = set()
    with obj.open("rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        for sym in symtab.iter_symbols():
            match = KERNEL_SYMBOL.search(sym.name)
            if match and sym["st_shndx"] == "SHN_UNDEF":
                kind, dtype, dim, causal = match.groups()
                refs.add((kind, dtype, int(dim), causal == "1"))
    return refs


def compile_flash_api(summary: dict, obj: Path) -> None:
    """flash_api.cpp with the exact cxx command of the build description, writing obj (the CUDA
    headers are named once more in case CUDA_HOME resolved to an nvcc wrapper's directory), at
    -O0: which kernels it references does not depend on optimisation (the dispatch patch drops a
    left-out kernel's call with `if constexpr`, which instantiates nothing at any level), and
    -O0 compiles in a third of the time."""
    (command,) = [c for c in summary["compile_commands"] if c["kind"] == "cxx"]
    args = ["-O0" if a == "-O3" else a for a in command["args"] if a != "-MMD"]
    del args[args.index("-MF") : args.index("-MF") + 2]  # no dependency file
    args[args.index("-o") + 1] = str(obj)
    args.insert(1, f"-I{CUDA_INCLUDE}")
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.mark.slow
def test_full_flash_api_references_every_kernel(torch211_python, tmp_path):
    """flash_api.cpp of an untailored build (g++, torch 2.11 headers): with the kernel-set patch
    applied but inert, its object file still references all 72 kernels. A tailored set's
    references are its kept kernels: the real builds' modules import (every reference defined)
    and hold only those kernels (tests/e2e/test_real_build.py, test_cuda12_builds.py)."""
    summary = prepare(torch211_python, tmp_path / "b")
    obj = tmp_path / "flash_api.o"
    compile_flash_api(summary, obj)
    refs = kernel_references(obj)
    assert len(refs) == 72
    assert ("run_mha_bwd_", "half_t", 64, True) in refs
