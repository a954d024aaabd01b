"""What went into a wheel (fa_backend/pipeline/_provenance.py), directly, from real plans (the FA2
flavour's of the sample and of the pinned 2.8.3 sdist, FA3's of the pinned trees) and toolchain
decisions given as values: the wheel-cache fingerprint names everything that decides what the
wheel computes and nothing that only decides how fast it is built, and the provenance records
the plan, the torch and what build.ninja compiles. fingerprint() and provenance() probe the host
compiler (`c++ --version`) and the network seal (`unshare --net true`) themselves each time they
run, so even these direct tests start processes: the integration tier. A real build's
provenance: tests/integration/test_hooks.py."""

from __future__ import annotations

import dataclasses
import hashlib
import os

import pytest
from conftest import FA3_SHARED, REPO, SHARED_SDISTS, fa2_plan, planned, torch_info

from fa_backend.core._version import __version__
from fa_backend.flavours._interface import Tools
from fa_backend.flavours.fa2 import _releases
from fa_backend.flavours.fa3._flavour import FLAVOUR as FA3
from fa_backend.pipeline import _provenance, _seal
from fa_backend.pipeline._compile_plan import Prepared
from fa_backend.resources import GUARD
from fa_backend.toolchain._archs import ArchChoice, Selection
from fa_backend.toolchain._compile_commands import Command

CPU_TOOLS = Tools(None, None, jobs=2, nvcc_threads=None, compiler_cache=None, shape={"tu_parts": 1})
SM90 = ArchChoice(Selection(("90",), "setting cuda-archs"), ("90",), (), {})


# the host compiler, a program of the test's own whose version line is known (facts that do not
# come from the code under test): CXX names it, as it names any compiler
CXX_VERSION = "sample-c++ (fa-shim tests) 9.9.9"


@pytest.fixture
def plan(sample_sdist_dir, monkeypatch, tmp_path):
    for name in (*_provenance._COMPILER_ENV, "SOURCE_DATE_EPOCH"):
        monkeypatch.delenv(name, raising=False)
    cxx = tmp_path / "bin" / "sample-c++"
    cxx.parent.mkdir()
    cxx.write_text(f'#!/bin/sh\necho "{CXX_VERSION}"\necho "Copyright (C) nobody"\n')
    cxx.chmod(0o755)
    monkeypatch.setenv("CXX", str(cxx))
    return fa2_plan(sample_sdist_dir)


def test_the_fingerprint_of_a_plan(plan):
    fp = _provenance.fingerprint(plan, CPU_TOOLS)
    cxx = os.environ["CXX"]
    assert fp == {
        "wheel": plan.wheel_name,
        "metadata": hashlib.sha256(plan.metadata.encode()).hexdigest(),
        "fa_shim": __version__,
        "fa_shim_sources": _provenance.fa_shim_sources(),
        "sources": {"sha256": plan.source.sdist.sha256},  # the sdist by content, not its path
        "patches": [],
        "guard": hashlib.sha256(GUARD.read_bytes()).hexdigest(),
        "torch": ["2.13.0+cpu", None, 1, "c++20"],
        "nvcc": None,
        "nvcc_build": None,
        "archs": None,
        "kernel_set": plan.kernel_set,
        "host_compiler": [cxx, CXX_VERSION],
        "env": {**dict.fromkeys(_provenance._COMPILER_ENV), "CXX": cxx},
        "source_date_epoch": None,  # the wheel's zip times (wheel/_wheelfile)
    }
    assert len(fp["fa_shim_sources"]) == 64


def test_jobs_threads_and_parts_do_not_change_it(plan):
    """Machines of any size share a cache entry: parts cut the objects, not a kernel."""
    big = Tools(None, None, jobs=16, nvcc_threads=4, compiler_cache="ccache", shape={"tu_parts": 3})
    assert _provenance.fingerprint(plan, big) == _provenance.fingerprint(plan, CPU_TOOLS)


def test_what_decides_the_wheel_changes_it(plan, monkeypatch):
    base = _provenance.fingerprint(plan, CPU_TOOLS)
    old_abi = dataclasses.replace(
        plan, torch=torch_info("2.13.0+cpu", None, abi=0, cxx_std="c++20")
    )
    assert _provenance.fingerprint(old_abi, CPU_TOOLS)["torch"] != base["torch"]
    sm90 = dataclasses.replace(CPU_TOOLS, archs=SM90)
    assert _provenance.fingerprint(plan, sm90)["archs"] == ["90"]
    monkeypatch.setenv("CXXFLAGS", "-DSAMPLE_EXTRA=1")
    changed = _provenance.fingerprint(plan, CPU_TOOLS)
    assert changed["env"]["CXXFLAGS"] == "-DSAMPLE_EXTRA=1" and changed != base
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # other zip times, other bytes
    assert _provenance.fingerprint(plan, CPU_TOOLS)["source_date_epoch"] == "1700000000"


def test_a_pinned_tailored_plan_counts_its_patches_by_content_and_its_kernel_set():
    full = fa2_plan(SHARED_SDISTS, "2.8.3")
    tailored = fa2_plan(SHARED_SDISTS, "2.8.3", head_dims="128", dtypes="bf16")
    a, b = (_provenance.fingerprint(p, CPU_TOOLS) for p in (full, tailored))
    assert a["patches"] == b["patches"] == [p.sha256 for p in _releases.patches("2.8.3")]
    assert a["sources"] == {"sha256": _releases.release("2.8.3").sha256}
    assert a["kernel_set"] != b["kernel_set"] and a["wheel"] != b["wheel"]


def _prepared(tmp_path, tools, commands, extensions) -> Prepared:
    source = tmp_path / "scratch" / "flash_attn-0.1.0"
    report = {"extensions": extensions}
    return Prepared(source, tools, source / "build.ninja", commands, report, tmp_path / "log")


def test_the_provenance_records_the_plan_torch_and_what_build_ninja_compiles(
    plan, tmp_path, monkeypatch
):
    commands = [
        Command("cxx", "csrc/flash_api.cpp", ("c++", "-c", "csrc/flash_api.cpp")),
        Command(
            "nvcc",
            "csrc/k.cu",
            (
                "nvcc",
                "-gencode",
                "arch=compute_90a,code=sm_90a",
                "-gencode=arch=compute_80,code=sm_80",  # torch's cpp_extension: one token
            ),
        ),
    ]
    injected = [{"name": "flash_attn_2_cuda", "injected": {"cxx": ["-D_GLIBCXX_USE_CXX11_ABI=1"]}}]
    monkeypatch.setenv("_FA_SHIM_TEST_SEAL", "proxy")  # the seal a build without unshare gets
    # the seal is probed once per process: an earlier in-process build's probe is cached, and
    # this test's must not stay cached for later ones
    _seal.choose.cache_clear()
    try:
        prov = _provenance.provenance(plan, _prepared(tmp_path, CPU_TOOLS, commands, injected))
    finally:
        _seal.choose.cache_clear()
    assert prov["network_seal"] == "proxy to a closed port"
    assert prov["fa_shim_version"] == __version__
    assert prov["flash_attn_version"] == "0.1.0" and prov["distribution"] == "flash-attn"
    assert prov["sdist"] == plan.flavour.sources(plan, with_origin=True)  # FA2's sources_key
    assert prov["sdist"]["pinned"] is False and prov["sdist"]["file"] == "flash_attn-0.1.0.tar.gz"
    assert (prov["wheel_version"], prov["python_tag"]) == (plan.version, str(plan.tag))
    assert prov["torch"] == {
        "version": "2.13.0+cpu",
        "cuda": None,
        "cxx11_abi": 1,
        "cxx_std": "c++20",
        "path": "/t",
        "stable_abi": None,  # a torch-bound module: it serves this torch release only
        "binding": "torch 2.13.0 (its C++ ABI)",
    }
    assert prov["nvcc"] is None and prov["cuda_arch_choice"] is None
    assert prov["cuda_archs"] == ["80", "90a"]  # off every form of -gencode, sorted
    assert prov["compile_commands"] == {"cxx": 1, "nvcc": 1}
    assert prov["injected_flags"] == injected
    cxx = os.environ["CXX"]
    assert prov["host_compiler"] == {"command": cxx, "path": cxx, "version": CXX_VERSION}
    assert (prov["patches"], prov["kernel_set"], prov["tu_parts"]) == ([], plan.kernel_set, 1)
    assert prov["compiler_cache"] is None


def test_fa3_records_both_pinned_trees_under_its_own_key(fa3_tarballs, tmp_path):
    plan = planned(
        FA3,
        {"fa3-source-dir": str(FA3_SHARED), "cache-dir": str(tmp_path / "cache")},
        project_dir=REPO / "flash-attn-3",
        torch=torch_info("2.11.0+cu130", "13.0"),
    )
    prov = _provenance.provenance(plan, _prepared(tmp_path, CPU_TOOLS, [], []))
    assert prov["distribution"] == "flash-attn-3" and "sdist" not in prov
    trees = prov["fa3_sources"]
    assert {trees["hopper"]["origin"], trees["cutlass"]["origin"]} == {f"directory {FA3_SHARED}"}
    fp = _provenance.fingerprint(plan, CPU_TOOLS)
    assert fp["sources"] == FA3.sources(plan, with_origin=False)
    assert "origin" not in fp["sources"]["hopper"]  # where a tree came from is not what it is
