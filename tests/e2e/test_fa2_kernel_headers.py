"""FA2's kernel sources include no torch, c10 or Python header (vendored 40-kernel-headers.patch,
then 50-torch-free-kernels.patch: a local Philox state and unpack, c10's two CUDA checks reporting
through flash_api.cpp), and compile the same machine code as upstream's. The real nvcc 13.0 for
sm_80, the CUDA 13.0 torch 2.11 venv, the build's own command line (`python -m fa_backend
prepare`).

A forward kernel source (head dim 32, bf16, the five DISABLE switches) is compiled to cubins
twice: in the prepared tree, and in a copy of it with the two patches reversed (upstream's
headers, everything else as built); every kernel's machine code is the same, byte for byte. The
backward source's cubins compared the same way once (2 passed in 296 s, commit 63303ba); CI
compares the forward one, which costs a fifth of the time, and checks with `nvcc -M` that the
backward source reads no torch or Python header. The kernel sources' objects then depend on no
torch: the object cache (fleet/_objects) serves them to every torch of the toolkit. About 2
CPU-minutes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import SHARED_SDISTS, prepared_set, run
from kernel_symbols import command_for, compile_all, cubin_command, kernel_code

from fa_backend.flavours.fa2 import _releases, _tu_parts

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
SOURCE = "flash_fwd_hdim32_bf16_sm80.cu"  # the set's, whose build command compiles both
BACKWARD = "flash_bwd_hdim32_bf16_causal_sm80.cu"  # read with nvcc -M only
TORCH_FREE = ("40-kernel-headers.patch", "50-torch-free-kernels.patch")


@pytest.fixture(scope="module")
def prepared(torch211_python, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("fa2-headers")
    return prepared_set(torch211_python, tmp, {**SET, "sdist-dir": str(SHARED_SDISTS)})


@pytest.fixture(scope="module")
def kernel_dirs(prepared, tmp_path_factory) -> dict[str, Path]:
    """The prepared kernel directory, and a copy of its tree with the two patches reversed."""
    patched = Path(prepared["source"]) / _tu_parts.KERNEL_DIR
    root = tmp_path_factory.mktemp("upstream-headers")
    shutil.copytree(patched.parent, root / "csrc" / "flash_attn")
    version = prepared["provenance"]["flash_attn_version"]
    patches = [p for p in _releases.patches(version) if p.name in TORCH_FREE]
    assert [p.name for p in patches] == list(TORCH_FREE)
    for patch in reversed(patches):
        # -E: the files the patch creates are emptied by the reverse, then removed
        run(["patch", "-R", "-E", "-p1", "--batch", "--fuzz=0", "-i", patch.path], cwd=root)
    upstream = root / _tu_parts.KERNEL_DIR
    assert not (upstream / "fa_shim_torch_free.h").exists()
    return {"patched": patched, "upstream": upstream}


@pytest.fixture(scope="module")
def commands(prepared, torch211_python) -> dict[str, list[str]]:
    """The build's command for each tree: upstream's kernel sources read torch's and Python's
    headers, so theirs has the include paths torch's cpp_extension gives every build; fa-shim's
    torch-free kernels compile without them (resources/upstream_driver)."""
    args = next(c["args"] for c in prepared["compile_commands"] if c["file"].endswith(SOURCE))
    torch_dir = Path(prepared["provenance"]["torch"]["path"])
    code = "import sysconfig; print(sysconfig.get_path('include'))"
    python = run([torch211_python, "-c", code]).stdout.strip()
    torch = [f"-I{torch_dir / 'include'}", f"-I{torch_dir / 'include/torch/csrc/api/include'}"]
    return {"patched": list(args), "upstream": [args[0], *torch, f"-I{python}", *args[1:]]}


def test_the_kernels_machine_code_is_upstreams(commands, kernel_dirs, tmp_path):
    cubins = {name: tmp_path / f"{name}-{SOURCE}.cubin" for name in kernel_dirs}
    compile_all([cubin_command(commands[n], kernel_dirs[n] / SOURCE, c) for n, c in cubins.items()])
    patched, upstream = kernel_code(cubins["patched"]), kernel_code(cubins["upstream"])
    assert len(upstream) >= 2, sorted(upstream)  # the source's kernels, found by name
    assert sorted(patched) == sorted(upstream)
    assert all(patched[k] == upstream[k] for k in upstream)


def test_the_kernel_sources_read_no_torch_or_python_header(
    prepared, commands, kernel_dirs, tmp_path
):
    """nvcc -M lists the headers a compile reads (the patched tree's under the build's own
    command, which names no torch or Python directory)."""
    torch_dir = Path(prepared["provenance"]["torch"]["path"]).resolve()
    read = {}
    for name, kernel_dir in kernel_dirs.items():
        args = command_for(commands[name], kernel_dir / BACKWARD, tmp_path / "x.o")
        i = args.index("-o")
        args = [a for a in args[:i] + args[i + 2 :] if a != "-c"] + ["-M"]
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        read[name] = [Path(p).resolve() for p in out.replace("\\\n", " ").split()[1:]]
    assert any(torch_dir in p.parents for p in read["upstream"])
    assert not [p for p in read["patched"] if torch_dir in p.parents or p.name == "Python.h"]
