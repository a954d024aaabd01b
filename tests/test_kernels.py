"""Tailored kernel sets: settings -> sources/defines/label, the dispatch patch, and proofs that a
tailored flash_api compiles with references to exactly the kernels the set keeps."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import REPO, SHARED_SDISTS, run
from packaging.version import Version

from fa_backend.core._errors import FaShimError
from fa_backend.flavours.fa2 import _kernels, _releases
from fa_backend.pipeline import _patches
from fa_backend.pipeline._compile_commands import Command
from fa_backend.settings._settings import Settings
from fa_backend.wheel import _metadata

CUDA_INCLUDE = Path("/usr/local/cuda-13.0/include")
BASE_LABEL = "cu130torch2.11cxx11abiTRUE"
# A prepared torch 2.11 venv can stand in for the session fixture: TORCH211_PYTHON=/path/python
TORCH211 = os.environ.get("TORCH211_PYTHON")
INFERENCE = {"head_dims": ("128",), "dtypes": ("bf16",), "forward_only": True}
INFERENCE_KERNELS = {
    "flash_fwd_hdim128_bf16_sm80.cu",
    "flash_fwd_hdim128_bf16_causal_sm80.cu",
    "flash_fwd_split_hdim128_bf16_sm80.cu",
    "flash_fwd_split_hdim128_bf16_causal_sm80.cu",
}


def tailor(version="2.8.3", **settings) -> _kernels.Tailoring:
    return _kernels.tailoring(Settings(**settings), version)


# ------------------------------------------------------------------------------- the model


def test_no_settings_is_the_full_set_for_any_version():
    for version in ("2.8.3", "2.8.3.post2", "0.1.0"):
        t = tailor(version)
        assert t.full and t.label == "" and not t.defines and not t.exclude_sources


def test_inference_set():
    t = tailor(**INFERENCE)
    assert t.label == ".hdim128.bf16.fwd" and t.kernel_set == "hdim128.bf16.fwd"
    assert t.defines == (
        "-DFA_SHIM_TAILORED",
        *(f"-DFA_SHIM_NO_HDIM{d}" for d in (32, 64, 96, 192, 256)),
        "-DFA_SHIM_NO_FP16",
        "-DFA_SHIM_NO_BACKWARD",
    )
    assert "flash_bwd_*.cu" in t.exclude_sources and "flash_*_fp16_*.cu" in t.exclude_sources
    assert _kernels.expected_kernels(t, "2.8.3") == INFERENCE_KERNELS
    assert t.describe()["head_dims"] == [128]


def test_label_order_is_canonical_and_pep440():
    t = tailor(head_dims=("128", "hdim64"), disable=("uneven-k", "dropout"), dtypes=("float16",))
    assert t.label == ".hdim64.hdim128.fp16.nodropout.nounevenk"
    version = _metadata.full_version("2.8.3", BASE_LABEL + t.label)
    assert (
        Version(version).local
        == "cu130torch2.11cxx11abitrue.hdim64.hdim128.fp16.nodropout.nounevenk"
    )


def test_all_values_listed_is_the_full_set():
    t = tailor(head_dims=("32", "64", "96", "128", "192", "256"), dtypes=("bf16", "fp16"))
    assert t.full


def test_disable_only_defines_upstream_switches():
    t = tailor(disable=("softcap", "alibi"))
    assert t.defines == ("-DFLASHATTENTION_DISABLE_ALIBI", "-DFLASHATTENTION_DISABLE_SOFTCAP")
    assert t.exclude_sources == () and t.label == ".noalibi.nosoftcap"
    assert len(_kernels.expected_kernels(t, "2.8.3")) == 72


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"head_dims": ("80",)}, ["'80'", "hdim96", "use 96"]),
        ({"head_dims": ("12x",)}, ["'12x'", "32, 64, 96, 128, 192, 256"]),
        ({"dtypes": ("bf61",)}, ["'bf61'", "Did you mean 'bf16'?"]),
        ({"dtypes": ("fp32",)}, ["'fp32'", "fp16, bf16"]),
        ({"disable": ("dropuot",)}, ["'dropuot'", "Did you mean 'dropout'?"]),
    ],
)
def test_unknown_values_are_errors_with_hints(settings, words):
    with pytest.raises(FaShimError) as exc:
        tailor(**settings)
    message = exc.value.render()
    assert all(w in message for w in words), message


def test_tailoring_an_unpatched_version_is_an_error():
    with pytest.raises(FaShimError) as exc:
        tailor("2.6.3", forward_only=True)
    assert "2.6.3" in exc.value.cause and "2.8.3" in exc.value.fix


def test_every_tailorable_version_ships_its_patch():
    spaces = {v: _releases.release(v).kernels for v in _releases.tailorable()}
    assert list(spaces) == ["2.8.3", "2.8.3.post2"]
    for version, space in spaces.items():
        names = [p.name for p in _patches.patches_for(version)]
        assert space.patch in names, (version, names)


def test_check_sources():
    t = tailor(**INFERENCE)
    commands = [Command("cxx", "/s/flash_api.cpp", ())]
    commands += [Command("nvcc", f"/s/{k}", ()) for k in sorted(INFERENCE_KERNELS)]
    _kernels.check_sources(commands, t, "2.8.3")
    with pytest.raises(FaShimError) as exc:  # one kernel lost: an undefined symbol at import
        _kernels.check_sources(commands[:-1], t, "2.8.3")
    assert "1 missing" in exc.value.cause
    extra = [*commands, Command("nvcc", "/s/flash_bwd_hdim128_bf16_sm80.cu", ())]
    with pytest.raises(FaShimError):
        _kernels.check_sources(extra, t, "2.8.3")


# ------------------------------------------------------------------------------- the patch


@pytest.fixture(scope="module", params=["2.8.3", "2.8.3.post2"])
def patched_source(request, tmp_path_factory) -> Path:
    """The real sdist, extracted and patched exactly as a build does."""
    version = request.param
    dest = tmp_path_factory.mktemp(f"src-{version}")
    with tarfile.open(SHARED_SDISTS / f"flash_attn-{version}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    source = dest / f"flash_attn-{version}"
    _patches.apply_all(_patches.patches_for(version), source)
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


# ------------------------------------------------------------------------------- real builds


@pytest.fixture(scope="module")
def t211(request) -> Path:
    return Path(TORCH211) if TORCH211 else request.getfixturevalue("torch211_python")


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
def test_prepare_tailored_build_description(t211, tmp_path, version):
    summary = prepare(
        t211,
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
def test_prepare_untailored_is_upstreams_build(t211, tmp_path):
    summary = prepare(t211, tmp_path / "b")  # a new directory: tmp_path holds the cache
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
def test_kernel_files_preprocess_exactly_as_upstream(t211, tmp_path):
    """The patch and the tailoring defines change no kernel: the kept kernel files of a tailored
    build preprocess to the same code as in the pristine sdist with upstream's flags (unsplit:
    the tu-parts patch is inert too)."""
    summary = prepare(
        t211, tmp_path / "b", "head-dims=128", "dtypes=bf16", "forward-only=true", "tu-parts=1"
    )
    source = Path(summary["source"])
    with tarfile.open(SHARED_SDISTS / "flash_attn-2.8.3.tar.gz") as tar:
        tar.extractall(tmp_path / "u", filter="data")
    pristine = tmp_path / "u" / "flash_attn-2.8.3"
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
def test_tailored_flash_api_references_only_kept_kernels(t211, tmp_path):
    """The real flash_api.cpp of a tailored build (g++, torch 2.11 headers): its object file has
    undefined references to exactly the kernels the set keeps, so the .so imports and links."""
    summary = prepare(t211, tmp_path / "b", "head-dims=128", "dtypes=bf16", "forward-only=true")
    obj = tmp_path / "flash_api.o"
    compile_flash_api(summary, obj)
    assert kernel_references(obj) == {
        (kind, "bfloat16_t", 128, causal)
        for kind in ("run_mha_fwd_", "run_mha_fwd_splitkv_dispatch")
        for causal in (False, True)
    }


@pytest.mark.slow
def test_full_flash_api_references_every_kernel(t211, tmp_path):
    """The control for the test above: the same compile untailored names all 72 kernels."""
    summary = prepare(t211, tmp_path / "b")
    obj = tmp_path / "flash_api.o"
    compile_flash_api(summary, obj)
    refs = kernel_references(obj)
    assert len(refs) == 72
    assert ("run_mha_bwd_", "half_t", 64, True) in refs


def test_label_survives_wheel_naming():
    t = tailor(**INFERENCE)
    version = _metadata.full_version("2.8.3", BASE_LABEL + t.label)
    name = _metadata.wheel_filename(version, _metadata.wheel_tag())
    assert name.startswith(f"flash_attn-2.8.3+{BASE_LABEL}.hdim128.bf16.fwd-cp")
