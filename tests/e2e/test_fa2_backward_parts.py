"""FA2's backward kernel sources compiled in parts (issue 24; vendored 30-tu-parts.patch, which
splits them as it splits the forward ones) make the same kernels as the whole source: the real
nvcc 13.0 for sm_80, the CUDA 13.0 torch 2.11 venv, the build's own command line.

The set: flash-attn 2.8.3.post2 (the default), head dim 32, bf16, forward + backward, the five
DISABLE switches on, `-C tu-parts=2` (the cheapest backward source,
`flash_bwd_hdim32_bf16_causal_sm80.cu`: its two dq/dk/dv kernels, two dot_do_o and one
convert_dq). `python -m fa_backend prepare` writes
build.ninja: every kernel source is compiled as its parts, the wheel keeps the set's label.
The whole source is compiled with its part's command, and the kernels of the objects compared by
`nm`; the launchers part 0 calls are the ones the other parts define; each kernel's machine code
in the parts' cubins is the whole source's, byte for byte (what lets a full build on many cores
cut only its longest sources, issue 45); unsplit, the patched backward header preprocesses to
upstream's. About 4 CPU-minutes (the objects keep their cubins)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import SHARED_SDISTS, prepared_set, upstream_kernel_tree
from kernel_symbols import command_for, compile_all, cubin_of, keeping_cubin, kernel_code, kernels

from fa_backend.flavours.fa2 import _tu_parts

pytestmark = [pytest.mark.slow, pytest.mark.realbuild]

SET = {
    "head-dims": "32",
    "dtypes": "bf16",
    "disable": "dropout,alibi,softcap,local,uneven_k",
    "cuda-archs": "80",
    "tu-parts": "2",
    "compiler-cache": "none",
}
SOURCE = "flash_bwd_hdim32_bf16_causal_sm80.cu"
LABEL = ".hdim32.bf16.nodropout.noalibi.nosoftcap.nolocal.nounevenk-"


@pytest.fixture(scope="module")
def prepared(torch211_python, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("fa2-bwd-parts")
    return prepared_set(torch211_python, tmp, {**SET, "sdist-dir": str(SHARED_SDISTS)})


def test_every_kernel_source_is_compiled_as_its_parts(prepared):
    names = sorted(Path(c["file"]).name for c in prepared["compile_commands"])
    kernels = [f"flash_{p}_hdim32_bf16{c}_sm80.cu" for p in ("fwd", "fwd_split", "bwd")
               for c in ("", "_causal")]  # fmt: skip
    assert names == sorted([*_tu_parts.split_names(kernels, 2), "flash_api.cpp"])
    assert prepared["provenance"]["tu_parts"] == 2
    assert LABEL in prepared["wheel"]  # the label names the set; parts change no kernel


@pytest.fixture(scope="module")
def objects(prepared, tmp_path_factory) -> dict[str, Path]:
    """The whole backward source and its parts compiled with the part's command, each keeping
    the cubin nvcc embeds in its object (one compile serves the symbol and the machine code
    tests)."""
    tmp = tmp_path_factory.mktemp("bwd-objects")
    parts = _tu_parts.part_names(SOURCE, 2)
    commands = {Path(c["file"]).name: c["args"] for c in prepared["compile_commands"]}
    kernel_dir = Path(prepared["source"]) / _tu_parts.KERNEL_DIR
    objects = {name: tmp / f"{name}.o" for name in (SOURCE, *parts)}
    compile_all(
        [keeping_cubin(commands[parts[1]], kernel_dir / n, obj) for n, obj in objects.items()]
    )
    return objects


def test_the_backward_parts_have_the_whole_sources_kernels(objects):
    parts = _tu_parts.part_names(SOURCE, 2)
    whole = kernels(objects[SOURCE])
    split = [kernels(objects[p]) for p in parts]
    assert len(whole) == 5 and sum(map(len, split)) == len(whole)  # each kernel in one part
    assert set().union(*split) == whole
    assert any("dq_dk_dv" in k for k in split[1] | split[2])  # the big ones left part 0
    # what part 0 launches, the other parts define (the module links)
    called = _symbols(objects[parts[0]], "-u")
    defined = _symbols(objects[parts[1]], "--defined-only") | _symbols(
        objects[parts[2]], "--defined-only"
    )
    launchers = {s for s in called if "fa_shim_launch_bwd" in s}
    assert len(launchers) == 2 and launchers <= defined


def test_each_kernels_machine_code_in_the_parts_is_the_whole_sources(objects):
    whole = kernel_code(cubin_of(objects[SOURCE]))
    split = [kernel_code(cubin_of(objects[part])) for part in _tu_parts.part_names(SOURCE, 2)]
    assert len(whole) >= 5, sorted(whole)  # dq_dk_dv x 2, dot_do_o x 2, convert_dq (by name)
    assert set().union(*split) == set(whole)
    for name, code in whole.items():  # a device function two parts call is in both: the same
        copies = [part[name] for part in split if name in part]
        assert copies and all(copy == code for copy in copies), name


def _symbols(obj: Path, which: str) -> set[str]:
    out = subprocess.run(["nm", which, obj], capture_output=True, text=True, check=True).stdout
    return {m.group(1) for m in re.finditer(r"(\S+)$", out, re.M)}


def test_unsplit_the_patched_backward_source_preprocesses_as_upstreams(prepared, tmp_path):
    """Without FA_SHIM_TU_PARTS the patch is inert: nvcc -E of the whole backward source in the
    patched tree and in the pristine sdist give the same code (line markers and blank lines
    dropped: the patch's inactive blocks leave blank lines); the pristine tree with the kernel
    headers patch (conftest's upstream_kernel_tree)."""
    command = next(
        c["args"]
        for c in prepared["compile_commands"]
        if Path(c["file"]).name.startswith("flash_bwd")
    )
    source = Path(prepared["source"])
    pristine = upstream_kernel_tree(tmp_path / "u")
    codes = []
    for root in (source, pristine):
        # fa-shim's prefix maps only rename paths (docs/reproducibility.md): compared without
        args = [a.replace(str(source), str(root)) for a in command if "-prefix-map=" not in a]
        args = command_for(args, root / _tu_parts.KERNEL_DIR / SOURCE, tmp_path / "x.o")
        i = args.index("-o")
        args = [a for a in args[:i] + args[i + 2 :] if a != "-c"] + ["-E", "-o", tmp_path / "x.ii"]
        subprocess.run(args, capture_output=True, text=True, check=True)
        lines = (tmp_path / "x.ii").read_text().replace(str(root), "<src>").splitlines()
        code = "\n".join(x for x in lines if x.strip() and not x.startswith("#"))
        codes.append(re.sub(r"__func__, static_cast<uint32_t>\(\d+\)", "__func__, __LINE__", code))
    assert codes[0] == codes[1]
