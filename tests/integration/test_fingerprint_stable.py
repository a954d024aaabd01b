"""The wheel cache's fingerprint (pipeline/_provenance.fingerprint) changes with each of its inputs
changed alone, and in that input's entry only: so a fingerprint that drops an input (the torch
release, a compiler variable, the nvcc build...) fails here. A torch-bound build keeps torch's
release, CUDA, C++ ABI and standard; a stable-ABI build keeps only its floor and CUDA major (a
build under torch 2.11.0 is a hit for 2.14.1, a miss for a CUDA 12 torch). Real plans (the FA2
flavour's of the sample and of the pinned 2.8.3 sdist) and compilers of the test's own, named as
a user names them (PATH, the variables). (The real stable wheel, built under 2.11.0 and installed
from the cache under 2.14.1: tests/e2e/test_fa3_build.py.)"""

from __future__ import annotations

import dataclasses
import os

import pytest
from conftest import SHARED_SDISTS, fa2_plan, pack_sample, torch_info
from packaging.version import Version

from fa_backend.flavours._interface import Tools
from fa_backend.flavours.fa2 import _releases
from fa_backend.pipeline import _provenance
from fa_backend.toolchain import _compilers
from fa_backend.toolchain._archs import ArchChoice, Selection
from fa_backend.toolchain._compilers import Nvcc

# the variables that reach the compilers, as this test knows them (not read from the code under
# test: a name dropped there must fail here)
COMPILER_VARIABLES = (
    "CXX", "CC", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "NVCC_APPEND_FLAGS",
    "NVCC_PREPEND_FLAGS", "NVCC_CCBIN", "PYTORCH_NVCC", "CPATH", "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH",
)  # fmt: skip
# set to `c++`, these also change the program nvcc runs (PYTORCH_NVCC) or its host compiler
NAME_A_PROGRAM = {"CC", "NVCC_CCBIN", "PYTORCH_NVCC"}
# fa-shim's own version and files: one checkout has one of each (test_provenance.py)
OWN = {"fa_shim", "fa_shim_sources", "guard"}
T211 = torch_info("2.11.0+cu130", "13.0")
SM80 = ArchChoice(Selection(("80",), "setting cuda-archs"), ("80",), (), {})
SM90 = ArchChoice(Selection(("90",), "setting cuda-archs"), ("90",), (), {})


def _program(path, line: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "{line}"\n')
    path.chmod(0o755)
    return str(path)


def _nvcc(path, build: str, release: str = "13.0") -> Nvcc:
    _program(path, f"Cuda compilation tools, release {release}, V{build}")
    return Nvcc(path, Version(release), "PATH")


@pytest.fixture
def host(tmp_path, monkeypatch):
    """No compiler variable set, and `c++` a program of the test's own, first on PATH."""
    for name in (*COMPILER_VARIABLES, "SOURCE_DATE_EPOCH"):
        monkeypatch.delenv(name, raising=False)
    _program(tmp_path / "bin" / "c++", "c++ (fa-shim tests) 9.9.9")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    _compilers.program.cache_clear()  # asked once per process: this test's programs are new
    return tmp_path


@pytest.fixture
def base(host, sample_sdist_dir):
    plan = dataclasses.replace(fa2_plan(sample_sdist_dir), torch=T211)
    return plan, Tools(_nvcc(host / "nvcc-a" / "nvcc", "13.0.88"), SM80, 2, None, None)


def _torch(plan, **changes):
    return dataclasses.replace(plan, torch=dataclasses.replace(plan.torch, **changes))


# each input changed alone -> (the fingerprint's entries it changes, the change: a function of
# the base plan and tools, the test's directory and monkeypatch, for the environment)
ONE_INPUT: dict = {}


def _input(name: str, *entries: str):
    def register(change):
        ONE_INPUT[name] = ({*entries}, change)
        return change

    return register


def _torch_input(name: str, **changes):
    _input(name, "torch")(lambda plan, tools, host, mp: (_torch(plan, **changes), tools))


_torch_input("torch release", version="2.11.1+cu130")
_torch_input("torch CUDA", cuda="13.2")
_torch_input("torch C++ ABI", abi=0)
_torch_input("torch C++ standard", cxx_std="c++20")


@_input("wheel name", "wheel")
def _(plan, tools, host, mp):
    return dataclasses.replace(plan, version="0.1.0+other"), tools


@_input("metadata", "metadata")
def _(plan, tools, host, mp):
    return dataclasses.replace(plan, metadata=plan.metadata + "Requires-Dist: einops\n"), tools


@_input("sources", "sources")
def _(plan, tools, host, mp):  # another sdist of the same version: the sample with a CUDA file
    other = fa2_plan(pack_sample(host / "other", cuda=True).parent)
    return dataclasses.replace(plan, source=other.source), tools


@_input("patches", "patches")
def _(plan, tools, host, mp):
    return dataclasses.replace(plan, patches=_releases.patches("2.8.3")[:1]), tools


@_input("nvcc release", "nvcc")
def _(plan, tools, host, mp):
    return plan, dataclasses.replace(tools, nvcc=Nvcc(tools.nvcc.path, Version("12.9"), "PATH"))


@_input("nvcc build", "nvcc_programs")
def _(plan, tools, host, mp):
    return plan, dataclasses.replace(tools, nvcc=_nvcc(host / "nvcc-b" / "nvcc", "13.0.99"))


@_input("archs", "archs")
def _(plan, tools, host, mp):
    return plan, dataclasses.replace(tools, archs=SM90)


@_input("host compiler's path", "host_compiler")
def _(plan, tools, host, mp):  # another `c++` first on PATH, printing the same version
    _program(host / "bin2" / "c++", "c++ (fa-shim tests) 9.9.9")
    mp.setenv("PATH", f"{host / 'bin2'}{os.pathsep}{os.environ['PATH']}")
    return plan, tools


@_input("host compiler's version", "host_compiler")
def _(plan, tools, host, mp):  # the same `c++`, upgraded in place
    _program(host / "bin" / "c++", "c++ (fa-shim tests) 9.9.10")
    return plan, tools


def _variable_input(name: str, value: str, *entries: str):
    def change(plan, tools, host, mp):
        mp.setenv(name, value)
        return plan, tools

    _input(f"${name}", *entries)(change)


for _name in COMPILER_VARIABLES:  # `c++`: for CXX, the program PATH's c++ already is
    _variable_input(_name, "c++", "env", *(["nvcc_programs"] if _name in NAME_A_PROGRAM else []))
_variable_input("SOURCE_DATE_EPOCH", "1700000000", "source_date_epoch")  # the zip times


def _changed(before: dict, after: dict) -> set[str]:
    return {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}


def test_every_entry_of_the_fingerprint_is_an_input_changed_here(base):
    fingerprint = _provenance.fingerprint(*base)
    named = {key for changed, _ in ONE_INPUT.values() for key in changed} | {"kernel_set"}
    assert set(fingerprint) == named | OWN
    assert set(fingerprint["env"]) == set(COMPILER_VARIABLES)


@pytest.mark.parametrize("name", ONE_INPUT)
def test_each_input_changed_alone_changes_its_entry_only(name, base, host, monkeypatch):
    expected, change = ONE_INPUT[name]
    before = _provenance.fingerprint(*base)
    changed = change(*base, host, monkeypatch)
    _compilers.program.cache_clear()  # a build asks each program once; this test changes them
    after = _provenance.fingerprint(*changed)
    assert _changed(before, after) == expected


def test_the_kernel_set_changes_it_with_the_wheel_version(host):
    full = fa2_plan(SHARED_SDISTS, "2.8.3")
    tailored = fa2_plan(SHARED_SDISTS, "2.8.3", head_dims="128", dtypes="bf16")
    tools = Tools(None, None, 2, None, None)
    before, after = (_provenance.fingerprint(p, tools) for p in (full, tailored))
    assert _changed(before, after) == {"kernel_set", "wheel", "metadata"}  # its local version


# a stable-ABI build (floor 2.10.0): the same key for every torch of its CUDA major
STABLE = {
    "torch release": (set(), {"version": "2.14.1+cu130"}),
    "torch CUDA minor": (set(), {"cuda": "13.2"}),
    "torch C++ ABI": (set(), {"abi": 0}),
    "torch C++ standard": (set(), {"cxx_std": "c++20"}),  # C++20 headers: no C++ type crosses
    "torch CUDA major": ({"torch"}, {"version": "2.11.0+cu128", "cuda": "12.8"}),  # libcudart 12
}


@pytest.mark.parametrize("name", STABLE)
def test_a_stable_build_serves_every_torch_of_its_cuda_major(name, base):
    expected, torch = STABLE[name]
    plan, tools = base
    stable = dataclasses.replace(plan, stable_abi="2.10.0")
    before = _provenance.fingerprint(stable, tools)
    assert before["torch"] == ["stable-abi", "2.10.0", 13]
    after = _provenance.fingerprint(_torch(stable, **torch), tools)
    assert _changed(before, after) == expected


def test_a_stable_build_keeps_its_floor(base):
    plan, tools = base
    floors = [dataclasses.replace(plan, stable_abi=f) for f in ("2.10.0", "2.11.0")]
    before, after = (_provenance.fingerprint(p, tools) for p in floors)
    assert _changed(before, after) == {"torch"}
