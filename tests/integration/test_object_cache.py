"""The object cache (fleet/_objects, resources/object_cache) through the real compiler launcher
and the real nvcc, on a one-kernel CUDA source: what is kept, what is served, what is refused.

Each unit is a real `python launcher.py STATS nvcc ...` as torch's build.ninja runs it, with the
spec the pipeline writes; the launcher's records say whether it compiled or was served."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fa_backend.fleet import _objects
from fa_backend.resources import LAUNCHER, launcher, object_cache

pytestmark = pytest.mark.integration

NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
TOOLKIT = Path(NVCC).resolve().parent.parent
KERNEL = """
#include "scale.h"
__global__ void scale(float *x, float a) { x[threadIdx.x] *= a * SCALE; }
void launch(float *x) { scale<<<1, 32>>>(x, 2.0f); }
"""


def _tree(path: Path, include: str = "") -> Path:
    """A build tree (a kernel source and its header) beside a stand-in for a torch's headers."""
    (path / "csrc").mkdir(parents=True)
    (path / "csrc" / "scale.h").write_text(f"{include}\n#define SCALE 1.0f\n")
    (path / "csrc" / "k.cu").write_text(KERNEL)
    _torch(path).mkdir(parents=True)
    (_torch(path) / "fake_torch.h").write_text("#define FAKE_TORCH 1\n")
    return path


def _torch(tree: Path) -> Path:
    return tree.parent / f"{tree.name}-venv" / "torch" / "include"


def _args(tree: Path, abi: int = 1) -> list[str]:
    """The nvcc part of a torch build.ninja command (after the compiler), absolute paths."""
    out = tree / "build" / "k.o"
    return [
        "-MD", "-MF", f"{out}.d", f"-I{tree / 'csrc'}", f"-I{_torch(tree)}",
        f"-Xcompiler=-ffile-prefix-map={_torch(tree)}=/fa-shim/torch",
        "-c", str(tree / "csrc" / "k.cu"), "-o", str(out),
        "-O3", "-std=c++17", "-gencode", "arch=compute_80,code=sm_80",
        "-DTORCH_EXTENSION_NAME=flash_attn_2_cuda", "--compiler-options", "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "--frandom-seed=k.cu",  # as the launcher seeds it
    ]  # fmt: skip


def _spec(tree: Path, root: Path, args: list[str]) -> Path:
    (tree / "build").mkdir(exist_ok=True)
    keys = _objects.Keys(tree, TOOLKIT, NVCC, "gcc")
    key = keys.key(args, str(tree / "csrc" / "k.cu"), tree)
    assert keys.excluded == {_torch(tree).resolve()}
    abi = next(a[-1] for a in args if a.startswith(_objects.ABI_DEFINE))
    units = {str(tree / "build" / "k.o"): {"key": key, "abi": abi}}
    return _objects.write_spec(tree / "build", root, units, keys.excluded, "torch 9.9", 60, 1)


def _launch(tree: Path, spec: Path, args: list[str]) -> subprocess.Popen:
    # nvcc's temporaries under fixed names, as the upstream build runs it (pipeline/_upstream)
    env = {**os.environ, object_cache.SPEC_ENV: str(spec), launcher.KEEP_ENV: "1"}
    stats = tree / "build" / "stats.jsonl"
    command = [sys.executable, LAUNCHER, stats, NVCC, *args]
    return subprocess.Popen(
        [str(c) for c in command], env=env, cwd=tree, stderr=subprocess.PIPE, text=True
    )


def _served(tree: Path) -> list[bool]:
    lines = (tree / "build" / "stats.jsonl").read_text().splitlines()
    return [json.loads(line)["cached"] for line in lines]


def _finish(proc: subprocess.Popen) -> str:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return err


def test_two_builders_racing_for_one_entry_both_finish_and_one_compiles(tmp_path):
    root = tmp_path / "objects"
    trees = [_tree(tmp_path / name) for name in ("a", "b")]
    procs = [_launch(t, _spec(t, root, _args(t)), _args(t)) for t in trees]
    for proc in procs:
        _finish(proc)
    served = [_served(t) for t in trees]
    assert sorted(served) == [[False], [True]]  # one compiled it, the other got its object
    (entry,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    for tree in trees:
        assert (tree / "build" / "k.o").read_bytes() == (entry / "object.o").read_bytes()
    record = json.loads((entry / "object.json").read_text())
    assert record["built_under"] == "torch 9.9" and record["source"] == "k.cu"
    assert not [p for p in root.iterdir() if ".part-" in p.name]  # nothing half-written


def test_an_entry_with_a_flipped_byte_is_compiled_again_never_linked(tmp_path):
    root, tree = tmp_path / "objects", _tree(tmp_path / "a")
    spec = _spec(tree, root, _args(tree))
    _finish(_launch(tree, spec, _args(tree)))
    (entry,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    good = (entry / "object.o").read_bytes()
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0xFF
    (entry / "object.o").write_bytes(bytes(flipped))

    err = _finish(_launch(tree, spec, _args(tree)))
    assert _served(tree) == [False, False]  # compiled both times: the flipped one not served
    assert "fails its sha256" in err
    assert (tree / "build" / "k.o").read_bytes() == good
    assert (entry / "object.o").read_bytes() == good  # the entry is whole again


def test_a_unit_that_reads_a_torch_header_is_compiled_and_not_kept(tmp_path):
    root = tmp_path / "objects"
    tree = _tree(tmp_path / "a", include='#include "fake_torch.h"')
    err = _finish(_launch(tree, _spec(tree, root, _args(tree)), _args(tree)))
    assert _served(tree) == [False]
    assert (tree / "build" / "k.o").is_file()
    assert "fake_torch.h" in err and "not cached" in err
    assert not root.exists() or not [p for p in root.iterdir() if not p.name.startswith(".")]


def test_the_key_is_the_units_inputs_not_torchs_or_this_builds_paths(tmp_path):
    """Torch's include directory and defines, the tree's location, fa-shim's path maps and the
    output paths leave the key as it is (the C++ ABI too: the launcher's entry names it unless
    the object shows it needs none); -std, an in-tree header and nvcc's flags change it."""
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")

    def key(tree: Path, args: list[str]) -> str:
        keys = _objects.Keys(tree, TOOLKIT, NVCC, "gcc")
        return keys.key(args, str(tree / "csrc" / "k.cu"), tree)

    base = key(a, _args(a))
    other_torch = [x.replace("flash_attn_2_cuda", "other") for x in _args(b)]
    assert key(b, other_torch) == base
    assert key(a, _args(a, abi=0)) == base  # the launcher names the ABI where it matters
    assert key(a, [x.replace("c++17", "c++20") for x in _args(a)]) != base
    assert key(a, [*_args(a), "--use_fast_math"]) != base
    (a / "csrc" / "scale.h").write_text("#define SCALE 2.0f\n")
    assert key(a, _args(a)) != base


@pytest.mark.parametrize("uses_string", [False, True])
def test_an_object_serves_the_old_abi_only_where_it_names_no_abi_tagged_symbol(
    tmp_path, uses_string
):
    """A new-ABI object naming no std::__cxx11 symbol is kept for every C++ string ABI, and a
    torch 2.6 (old ABI) build links it; one that names such a symbol is kept for its ABI alone."""
    string = "#include <string>\nstd::string label() { return std::string(40, 'x'); }\n"
    root = tmp_path / "objects"
    new, old = _tree(tmp_path / "new"), _tree(tmp_path / "old")
    for tree in (new, old):
        (tree / "csrc" / "k.cu").write_text(KERNEL + (string if uses_string else ""))
    _finish(_launch(new, _spec(new, root, _args(new, abi=1)), _args(new, abi=1)))
    (entry,) = [p.name for p in root.iterdir() if not p.name.startswith(".")]
    assert entry.endswith(".abi1") == uses_string
    _finish(_launch(old, _spec(old, root, _args(old, abi=0)), _args(old, abi=0)))
    assert _served(old) == [not uses_string]
