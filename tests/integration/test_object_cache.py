"""The object cache (fleet/_objects, fleet/_serve) through the real compiler launcher
and the real nvcc, on a one-kernel CUDA source: what is kept, what is served (by the files the
compile read, not the whole tree), what is refused, and what the wheel's provenance names.

Each unit is a real `python launcher.py STATS nvcc ...` as torch's build.ninja runs it, with the
spec the pipeline writes; the launcher's records say whether it compiled or was served."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import CAN_MOUNT, REPO, SHARED_SDISTS, fa2_plan, mounted
from packaging.version import Version

from fa_backend.cli import _cache_check
from fa_backend.core._errors import FaShimError
from fa_backend.core._hostlock import this_kernel
from fa_backend.flavours._interface import Tools
from fa_backend.fleet import _compiling, _objects, _serve
from fa_backend.pipeline import _provenance, _stats
from fa_backend.pipeline._compile_plan import Prepared
from fa_backend.resources import LAUNCHER, launcher
from fa_backend.toolchain import _compilers
from fa_backend.toolchain._compile_commands import Command
from fa_backend.toolchain._compilers import Nvcc

pytestmark = pytest.mark.integration
needs_mount = pytest.mark.skipif(
    not CAN_MOUNT, reason="needs root and a mount namespace (unshare -m) for a real disk"
)

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


def _args(tree: Path, abi: int = 1, unit: str = "k") -> list[str]:
    """The nvcc part of a torch build.ninja command (after the compiler), absolute paths."""
    out = tree / "build" / f"{unit}.o"
    return [
        "-MD", "-MF", f"{out}.d", f"-I{tree / 'csrc'}", f"-I{_torch(tree)}",
        f"-Xcompiler=-ffile-prefix-map={_torch(tree)}=/fa-shim/torch",
        "-c", str(tree / "csrc" / f"{unit}.cu"), "-o", str(out),
        "-O3", "-std=c++17", "-gencode", "arch=compute_80,code=sm_80",
        "-DTORCH_EXTENSION_NAME=flash_attn_2_cuda", "--compiler-options", "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "--frandom-seed=k.cu",  # as the launcher seeds it
    ]  # fmt: skip


def _env(**changes: str | None) -> dict[str, str]:
    """This process's environment with variables set (a value) or taken out (None)."""
    env = {**os.environ, **changes}
    return {name: value for name, value in env.items() if value is not None}


def _keys(tree: Path, env: dict | None = None, nvcc: str = NVCC, **kw) -> _objects.Keys:
    """The keys as the pipeline makes them (fleet/_compiling.object_cache), in `env`."""
    inputs, unkeyable = _compilers.nvcc_inputs(Path(nvcc), None, env or os.environ)
    assert unkeyable is None
    return _objects.Keys(tree, kw.pop("toolkit", TOOLKIT), inputs, **kw)


def _spec(tree: Path, root: Path, args: list[str], *more: list[str], keys=None, **how) -> Path:
    """The spec of these units (args: each one's command), as fleet/_compiling writes it, with
    `keys` (default: this process's environment's)."""
    (tree / "build").mkdir(exist_ok=True)
    keys, units = keys or _keys(tree), {}
    for unit in (args, *more):
        key = keys.key(unit, next(a for a in unit if a.endswith(".cu")), tree)
        abi = next(a[-1] for a in unit if a.startswith(_objects.ABI_DEFINE))
        units[unit[unit.index("-o") + 1]] = {"key": key, "abi": abi}
    assert _torch(tree).resolve() in keys.excluded
    return _objects.write_spec(
        tree / "build", root, units, keys.excluded, "torch 9.9", 60, 1, **how, keys=keys
    )


def _launch(
    tree: Path, spec: Path, args: list[str], env: dict | None = None, nvcc: str = NVCC, prefix=()
) -> subprocess.Popen:
    # nvcc's temporaries under fixed names, as the upstream build runs it (pipeline/_upstream)
    env = {**(env or os.environ), launcher.SPEC_ENV: str(spec), launcher.KEEP_ENV: "1"}
    env[launcher.SERVE_ENV] = _compiling.SERVE
    stats = _stats.stats_file(tree)  # where the pipeline reads it (Prepared.stats_file)
    # the nvcc torch runs: PYTORCH_NVCC's (pipeline/_upstream gives it to the launcher)
    nvcc_command = shlex.split(env.get("PYTORCH_NVCC", "")) or [nvcc]
    command = [*prefix, sys.executable, LAUNCHER, stats, *nvcc_command, *args]
    return subprocess.Popen(
        [str(c) for c in command], env=env, cwd=tree, stderr=subprocess.PIPE, text=True
    )


def _second_unit(tree: Path) -> list[str]:
    """k2.cu beside k.cu: another kernel, another entry."""
    kernel = KERNEL.replace("void scale", "void scale2").replace("scale<<<", "scale2<<<")
    (tree / "csrc" / "k2.cu").write_text(kernel.replace("launch", "launch2"))
    return _args(tree, unit="k2")


def _make_root(root: Path, prefix=()) -> tuple[bool, str]:
    """The pipeline's first step with the object cache (fleet/_compiling.object_cache)."""
    code = "import sys, pathlib; from fa_backend.fleet import _objects as o; "
    code += "print(o.make_root(pathlib.Path(sys.argv[1]), None))"
    proc = subprocess.run(
        [*prefix, sys.executable, "-c", code, str(root)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout.strip() == "True", proc.stderr


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _served(tree: Path) -> list[bool]:
    return [record["cached"] for record in _stats.tu_stats(_stats.stats_file(tree))]


def _finish(proc: subprocess.Popen) -> str:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return err


def _reused(tree: Path) -> list[dict]:
    """What the wheel's provenance names as reused objects, read from this run's records as the
    pipeline reads them (pipeline/_provenance, pipeline/_stats)."""
    plan = fa2_plan(SHARED_SDISTS, "2.8.3", cache_dir=str(tree.parent / "cache"))
    tools = Tools(None, None, 2, None, None, {})
    prep = Prepared(tree / "src", tools, tree / "build.ninja", [], {}, tree / "log")
    return _provenance.provenance(plan, prep)["reused_objects"]


# hostile row OC10
def test_two_builders_racing_for_one_entry_both_finish_and_one_compiles(tmp_path):
    """One compiles and keeps the object with the files it read; the other links it, and its
    wheel's provenance names that entry: key, the torch it was built under, host and flags."""
    root = tmp_path / "objects"
    trees = [_tree(tmp_path / name) for name in ("a", "b")]
    keys = [_keys(t) for t in trees]
    procs = [_launch(t, _spec(t, root, _args(t), keys=k), _args(t)) for t, k in zip(trees, keys)]
    for proc in procs:
        _finish(proc)
    served = [_served(t) for t in trees]
    assert sorted(served) == [[False], [True]]  # one compiled it, the other got its object
    (entry,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    for tree in trees:
        assert (tree / "build" / "k.o").read_bytes() == (entry / "object.o").read_bytes()
    record = json.loads((entry / "object.json").read_text())
    assert record["built_under"] == "torch 9.9" and record["source"] == "k.cu"
    assert {"csrc/k.cu", "csrc/scale.h"} <= record["includes"].keys()  # below the tree
    assert not [p for p in root.iterdir() if ".part-" in p.name]  # nothing half-written

    server = trees[served.index([True])]
    flags = keys[trees.index(server)].flags[entry.name.partition("-")[0]]
    assert "-I./csrc" in flags and not [f for f in flags if "venv" in f]  # the command as keyed
    assert _reused(server) == [
        {
            "key": entry.name,
            "source": "k.cu",
            "sha256": record["sha256"],
            "built_under": "torch 9.9",
            "host": socket.gethostname(),
            "flags": flags,
        }
    ]
    assert _reused(trees[served.index([False])]) == []  # it compiled its own


def _kept(tree: Path, root: Path, **how) -> bool:
    """A build of k.cu in `tree` on the cache at `root`: whether it was served."""
    _finish(_launch(tree, _spec(tree, root, _args(tree), **how), _args(tree)))
    return _served(tree)[-1]


def test_a_header_the_unit_does_not_include_changes_nothing(tmp_path):
    """Keyed by the files its compile read (its depfile), not by the include directory: a
    header beside them that changes, or appears, leaves the entry served."""
    root, tree = tmp_path / "objects", _tree(tmp_path / "a")
    (tree / "csrc" / "unrelated.h").write_text("#define UNRELATED 1\n")
    assert not _kept(tree, root)
    (tree / "csrc" / "unrelated.h").write_text("#define UNRELATED 2\n")
    (tree / "csrc" / "new.h").write_text("#define NEW 1\n")
    assert _kept(tree, root)


def test_a_change_in_an_included_header_misses_and_each_version_is_kept(tmp_path):
    """The included header changed: a miss, compiled and kept beside the first entry under the
    same key (the manifest: one entry per set of includes); the header back as it was: the
    first entry is served again."""
    root, tree = tmp_path / "objects", _tree(tmp_path / "a")
    first = (tree / "csrc" / "scale.h").read_text()
    assert not _kept(tree, root)
    (tree / "csrc" / "scale.h").write_text("#define SCALE 2.0f\n")
    assert not _kept(tree, root)
    entries = _objects.entries(root)
    assert len(entries) == 2 and len({e.name.partition("-")[0] for e in entries}) == 1
    (tree / "csrc" / "scale.h").write_text(first)
    assert _kept(tree, root)


def test_two_trees_split_differently_share_the_object(tmp_path):
    """Another host's tree holds other generated files beside the unit's (another unit and its
    header, as another split of the sources writes them): its k.cu is served from the first
    tree's entry, where the whole-tree key missed."""
    root = tmp_path / "objects"
    plain, split = _tree(tmp_path / "plain"), _tree(tmp_path / "split")
    _second_unit(split)  # k2.cu
    (split / "csrc" / "k2_generated.h").write_text("#define PART 2\n")
    assert not _kept(plain, root)
    assert _kept(split, root)
    assert len(_objects.entries(root)) == 1


@pytest.mark.parametrize("damage", ["a flipped byte", "truncated", "object.json not JSON"])
# hostile rows OC02, OC04, OC12
def test_a_damaged_entry_is_compiled_again_never_linked(tmp_path, damage):
    """A truncated object (OC02), object.json not JSON (OC04), and a flipped byte:
    `cache check`'s row fails it (OC12), the next build compiles the unit again, never links the
    damaged bytes, and the entry is whole again."""
    root, tree = tmp_path / "objects", _tree(tmp_path / "a")
    spec = _spec(tree, root, _args(tree))
    _finish(_launch(tree, spec, _args(tree)))
    (entry,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    good = (entry / "object.o").read_bytes()
    if damage == "a flipped byte":
        flipped = bytearray(good)
        flipped[len(flipped) // 2] ^= 0xFF
        (entry / "object.o").write_bytes(bytes(flipped))
    elif damage == "truncated":
        (entry / "object.o").write_bytes(good[:4000])
    else:
        (entry / "object.json").write_text("{not json")
    row = _cache_check._object_row(entry)
    assert row.result == "FAILED" and "not the object it recorded" in row.reason, row

    err = _finish(_launch(tree, spec, _args(tree)))
    assert _served(tree) == [False, False]  # compiled both times: the damaged one not served
    assert ("fails its sha256" in err) is (damage != "object.json not JSON"), err
    assert (tree / "build" / "k.o").read_bytes() == good
    assert (entry / "object.o").read_bytes() == good  # the entry is whole again
    assert _objects.check(entry) is None


# hostile row OC11
def test_the_lock_of_a_killed_builder_is_taken_over(tmp_path):
    """a builder killed while it held a unit's lock (this host, a pid that has
    exited): the next build takes the lock over with one warning naming it, compiles the unit
    and keeps it, and leaves no lock behind."""
    root, tree = tmp_path / "objects", _tree(tmp_path / "a")
    spec = _spec(tree, root, _args(tree))
    (unit,) = json.loads(spec.read_text())["units"].values()
    lock = root / ".locks" / f"{unit['key']}.lock"
    lock.parent.mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    holder = {"host": socket.gethostname(), "pid": gone.pid, "started": 0, **this_kernel()}
    lock.write_text(json.dumps(holder))
    err = _finish(_launch(tree, spec, _args(tree)))
    assert err.count("took over the object-cache lock") == 1 and str(lock) in err, err
    assert _served(tree) == [False] and len(_objects.entries(root)) == 1
    assert list(lock.parent.iterdir()) == []


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
    the object shows it needs none); -std and nvcc's flags change it (a header: its entry's
    includes, below)."""
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")

    def key(tree: Path, args: list[str]) -> str:
        return _keys(tree).key(args, str(tree / "csrc" / "k.cu"), tree)

    base = key(a, _args(a))
    other_torch = [x.replace("flash_attn_2_cuda", "other") for x in _args(b)]
    assert key(b, other_torch) == base
    assert key(a, _args(a, abi=0)) == base  # the launcher names the ABI where it matters
    assert key(a, [x.replace("c++17", "c++20") for x in _args(a)]) != base
    assert key(a, [*_args(a), "--use_fast_math"]) != base
    (a / "csrc" / "k.cu").write_text(KERNEL + "// changed\n")
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


def _value(name: str, tmp: Path) -> str:
    """A value for each variable that reaches nvcc, with which the unit still compiles."""
    include = tmp / "extra-include"
    include.mkdir(exist_ok=True)
    wrapper = tmp / "bin" / "nvcc-wrapper"  # another nvcc that runs: PYTORCH_NVCC swaps it
    wrapper.parent.mkdir(exist_ok=True)
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(NVCC)} "$@"\n')
    wrapper.chmod(0o755)
    libgcc = subprocess.run(["gcc", "-print-libgcc-file-name"], capture_output=True, text=True)
    gcc_lib = Path(libgcc.stdout.strip()).parent  # gcc's own programs' directory
    values = {
        "NVCC_APPEND_FLAGS": "-G",  # device debug code: the poisoning
        "NVCC_PREPEND_FLAGS": "-lineinfo",
        "NVCC_CCBIN": "g++",  # another host compiler than nvcc's default gcc
        "PYTORCH_NVCC": str(wrapper),
        "CPATH": str(include),
        "C_INCLUDE_PATH": str(include),
        "CPLUS_INCLUDE_PATH": str(include),
        "GCC_EXEC_PREFIX": f"{gcc_lib.parent.parent}/",  # gcc's own, named
        "COMPILER_PATH": str(gcc_lib),
    }
    return values[name]


@pytest.mark.parametrize("name", _compilers.NVCC_ENV)
def test_a_variable_that_reaches_nvcc_set_for_one_build_is_a_miss_for_the_next(tmp_path, name):
    """A build run once with NVCC_APPEND_FLAGS=-G (or any variable of the one list the wheel
    fingerprint reads too) keeps its object under its own key: the next build without it, on the
    same cache, is served nothing (the pipeline's own question: _objects.cached)."""
    root, env = tmp_path / "objects", _env(**{name: _value(name, tmp_path)})
    odd, plain = _tree(tmp_path / "odd"), _tree(tmp_path / "plain")
    odd_spec = _spec(odd, root, _args(odd), keys=_keys(odd, env))
    _finish(_launch(odd, odd_spec, _args(odd), env))
    assert _served(odd) == [False]
    assert len(_objects.entries(root)) == 1  # kept, under the odd build's key
    assert _objects.cached(odd_spec)  # which serves a build like it
    assert (
        _objects.cached(_spec(plain, root, _args(plain), keys=_keys(plain, _env(**{name: None}))))
        == {}
    )


def _conda_env(prefix: Path) -> Path:
    """A conda environment as conda's cuda-nvcc lays it out: nvcc in <prefix>/bin with its
    nvcc.profile, so that nvcc's own root (its TOP) is the environment, the toolkit's programs
    and directories linked in, and a site-packages that will hold torch."""
    toolkit = _compilers.nvcc_home(Path(NVCC))  # the real one (NVCC may be a wrapper)
    (prefix / "bin").mkdir(parents=True)
    for name in os.listdir(toolkit / "bin"):
        if name == "nvcc.profile":  # TOP = $(_HERE_)/..: the prefix, not the linked toolkit
            shutil.copy(toolkit / "bin" / name, prefix / "bin" / name)
        else:
            (prefix / "bin" / name).symlink_to(toolkit / "bin" / name)
    for name in ("nvvm", "targets"):
        (prefix / name).symlink_to(toolkit / name)
    site = prefix / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    return site


def test_torchs_headers_inside_a_toolkit_root_that_holds_the_environment_stay_excluded(tmp_path):
    """conda's nvcc: CUDA_HOME is the environment, so torch's include directory lies under the
    toolkit root. It is still excluded (torch's directory is never the toolkit's): a unit that
    reads a torch header is compiled by that real nvcc and not kept."""
    site = _conda_env(tmp_path / "env")
    nvcc = str(tmp_path / "env" / "bin" / "nvcc")
    toolkit = _compilers.nvcc_home(Path(nvcc))
    assert toolkit == (tmp_path / "env").resolve()  # nvcc itself says so
    (tmp_path / "a-venv").symlink_to(site)  # torch's headers at <prefix>/lib/python3.11/...
    tree, root = _tree(tmp_path / "a", include='#include "fake_torch.h"'), tmp_path / "objects"
    keys = _keys(tree, nvcc=nvcc, toolkit=toolkit, foreign=[site / "torch"])
    err = _finish(_launch(tree, _spec(tree, root, _args(tree), keys=keys), _args(tree), nvcc=nvcc))
    assert (site / "torch").resolve() in keys.excluded
    assert "fake_torch.h" in err and "not cached" in err, err
    assert _served(tree) == [False] and _objects.entries(root) == []


def test_an_input_that_cannot_be_keyed_sets_the_object_cache_aside_in_one_line(
    tmp_path, monkeypatch, capfd
):
    """fleet/_compiling.object_cache on a unit as build.ninja names it, for the pinned release
    (its patches take torch out of the kernels): keyable, it writes the spec with torch's and
    Python's directories excluded; with NVCC_CCBIN naming no compiler it writes none (every unit
    compiles as without the cache) and says why in one line."""
    plan = fa2_plan(SHARED_SDISTS, "2.8.3", cache_dir=str(tmp_path / "cache"))
    tree = _tree(tmp_path / "scratch" / "src")
    command = Command("nvcc", str(tree / "csrc" / "k.cu"), (NVCC, *_args(tree)))
    tools = Tools(Nvcc(Path(NVCC), Version("13.0"), "PATH"), None, 2, None, None, {})
    spec = tmp_path / "scratch" / launcher.SPEC_NAME
    assert _compiling.object_cache(plan, tools, tree, [command]) == frozenset()  # nothing kept yet
    excluded = {Path(p) for p in json.loads(spec.read_text())["excluded"]}
    assert {Path("/t"), Path(sysconfig.get_path("include")).resolve()} <= excluded  # torch's "/t"
    spec.unlink()
    monkeypatch.setenv("NVCC_CCBIN", str(tmp_path / "no-such-gcc"))
    capfd.readouterr()
    assert _compiling.object_cache(plan, tools, tree, [command]) == frozenset()
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "no-such-gcc, from NVCC_CCBIN" in err, err
    assert (
        err.startswith("fa-shim: warning: object cache not used by this build")
        and not spec.exists()
    )


def test_objects_compiled_outside_the_sources_slot_are_not_kept(tmp_path):
    """The device code records the source path (docs/reproducibility.md): a build that could
    not take its sources' slot (fleet/_compiling.place) compiles in its scratch directory, may be
    served, keeps nothing there; the audit refuses to compare from there, naming the slot."""
    plan = fa2_plan(SHARED_SDISTS, "2.8.3", cache_dir=str(tmp_path / "cache"))
    tree = _tree(tmp_path / "scratch" / "src")
    command = Command("nvcc", str(tree / "csrc" / "k.cu"), (NVCC, *_args(tree)))
    tools = Tools(Nvcc(Path(NVCC), Version("13.0"), "PATH"), None, 2, None, None, {})
    spec = tmp_path / "scratch" / launcher.SPEC_NAME
    for in_slot in (True, False):
        _compiling.object_cache(plan, tools, tree, [command], in_slot=in_slot)
        assert json.loads(spec.read_text())["keep"] is in_slot
    with pytest.raises(FaShimError, match="not in its sources' slot /tmp/fa-shim-src-<digest>"):
        _compiling.object_cache(plan, tools, tree, [command], tmp_path / "audit.jsonl")


def test_an_audit_that_would_compare_nothing_stops_before_compiling(tmp_path):
    """Hostile row MX07 with objects beside the wheels: `cache check --rebuild` under settings
    of which no entry and no kept object is (the full set against a tailored set's cache) would
    compile every unit for hours and then compare nothing. It stops first, before a compile;
    with one of its units' objects kept, it goes on."""
    plan = fa2_plan(SHARED_SDISTS, "2.8.3", cache_dir=str(tmp_path / "cache"))
    tree = _tree(tmp_path / "scratch" / "src")
    (tree / "build").mkdir()
    command = Command("nvcc", str(tree / "csrc" / "k.cu"), (NVCC, *_args(tree)))
    tools = Tools(Nvcc(Path(NVCC), Version("13.0"), "PATH"), None, 2, None, None, {})
    audit = tmp_path / "audit.jsonl"
    with pytest.raises(FaShimError, match="the rebuild would compare nothing"):
        _compiling.object_cache(plan, tools, tree, [command], audit, True, objects_only=True)
    assert not (tree / "build" / "k.o").exists()
    _compiling.object_cache(plan, tools, tree, [command], in_slot=True)  # a build that keeps it
    _finish(_launch(tree, tmp_path / "scratch" / launcher.SPEC_NAME, _args(tree)))
    served = _compiling.object_cache(plan, tools, tree, [command], audit, True, objects_only=True)
    assert served == frozenset()  # an audit compiles every unit, now to compare with that one


@needs_mount
# hostile rows OC01, OC07
def test_a_read_only_cache_serves_what_it_holds_and_compiles_the_rest(tmp_path):
    """A team's share, mounted read-only, holding one of the build's two objects: one warning
    naming it, the held object served, the other compiled here, and nothing written there; a
    share that turns read-only after the build began costs each unit a warning, never a crash."""
    root, tree = tmp_path / "objects", _tree(tmp_path / "a")
    units = [_args(tree), _second_unit(tree)]
    _finish(_launch(tree, _spec(tree, root, *units), units[0]))  # the team's k.cu
    before, prefix = _listing(root), mounted(root, "ro")
    keep, err = _make_root(root, prefix)
    assert not keep and err.count("warning:") == 1, err
    assert f"cannot keep kernel objects in {root} (Read-only file system)" in err, err
    assert "-C object-cache=false" in err
    spec = _spec(tree, root, *units, keep=keep)
    errs = [_finish(_launch(tree, spec, unit, prefix=prefix)) for unit in units]
    assert "warning" not in "".join(errs), errs  # the one warning was the pipeline's
    spec = _spec(tree, root, *units)  # writable when the build began
    err = _finish(_launch(tree, spec, units[1], prefix=prefix))
    assert f"cannot take a lock (Read-only file system: {root / '.locks'}/" in err, err
    assert "compiling k2.cu, keeping nothing" in err
    assert _served(tree)[1:] == [True, False, False]
    assert _listing(root) == before


@needs_mount
# hostile rows OC08, OC09
def test_a_full_cache_disk_compiles_and_keeps_nothing(tmp_path):
    """A full disk (or quota) under the cache: one warning from the pipeline, and a unit
    compiled without a word; one that fills after the build began: the lock's ENOSPC is a
    warning naming the lock, and the unit compiles."""
    root, tree = tmp_path / "objects", _tree(tmp_path / "a")
    root.mkdir()
    prefix = mounted(root, "full")
    keep, err = _make_root(root, prefix)
    assert not keep and err.count("warning:") == 1, err
    assert f"cannot keep kernel objects in {root} (No space left on device)" in err, err
    spec = _spec(tree, root, _args(tree), keep=keep)
    err = _finish(_launch(tree, spec, _args(tree), prefix=prefix))
    assert "warning" not in err, err
    err = _finish(_launch(tree, _spec(tree, root, _args(tree)), _args(tree), prefix=prefix))
    assert f"cannot take a lock (No space left on device: {root / '.locks'}" in err, err
    assert _served(tree) == [False, False] and (tree / "build" / "k.o").is_file()


@pytest.mark.parametrize("blocked", ["objects", "objects/.locks"])
# hostile rows OC05, OC06
def test_a_file_in_the_way_compiles_and_keeps_nothing(tmp_path, blocked):
    """The objects path, or its locks' directory, is a file: a warning naming it, no
    traceback, and the unit compiles (with the pipeline's warning, or without it)."""
    root, tree = tmp_path / "objects", _tree(tmp_path / "a")
    (tmp_path / blocked).parent.mkdir(exist_ok=True)
    (tmp_path / blocked).write_text("not a directory")
    keep, err = _make_root(root)
    assert not keep and err.count("warning:") == 1, err
    assert f"in {tmp_path / blocked} (a file is in the way: not a directory)" in err, err
    err = _finish(_launch(tree, _spec(tree, root, _args(tree), keep=keep), _args(tree)))
    assert "warning" not in err, err
    err = _finish(_launch(tree, _spec(tree, root, _args(tree)), _args(tree)))
    assert "cannot take a lock (" in err and str(root / ".locks") in err, err
    assert _served(tree) == [False, False]
    assert (tmp_path / blocked).read_text() == "not a directory"


# hostile row OC03
def test_an_audit_compiles_every_unit_and_names_a_planted_object(tmp_path):
    """`cache check --rebuild`'s compare (cli/_cache_check): an object with a flipped byte whose
    recorded sha256 was edited to match passes the cache's own check, so a build links it; the
    audit compiles every unit (none served, none kept) and names that entry, not the honest one."""
    root, tree = tmp_path / "objects", _tree(tmp_path / "a")
    units = [_args(tree), _second_unit(tree)]
    spec = _spec(tree, root, *units)
    for unit in units:
        _finish(_launch(tree, spec, unit))
    planted = next(e for e in _objects.entries(root) if "k.cu" in (e / "object.json").read_text())
    data = bytearray((planted / "object.o").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (planted / "object.o").write_bytes(bytes(data))
    record = json.loads((planted / "object.json").read_text())
    record["sha256"] = _serve.sha256_of(planted / "object.o")
    (planted / "object.json").write_text(json.dumps(record))
    assert _objects.check(planted) is None  # the cache's own check passes it
    before = _listing(root)

    audit = tmp_path / "audit.jsonl"
    spec = _spec(tree, root, *units, audit=audit)
    for unit in units:
        _finish(_launch(tree, spec, unit))
    assert _served(tree) == [False, False, False, False]
    rows = [_cache_check._audited(json.loads(line)) for line in audit.read_text().splitlines()]
    assert [(r.key, r.wheel, r.result) for r in rows] == [
        (planted.name, "object k.cu", "FAILED"),
        (next(e.name for e in _objects.entries(root) if e != planted), "object k2.cu", "ok"),
    ]
    assert "not what its inputs compile to" in rows[0].reason
    assert f"rm -r {planted}" in rows[0].reason
    assert _listing(root) == before  # nothing kept, nothing replaced
