"""The real flash-attn sdist (2.8.3.post2, the default) through the preparation (extract, verify,
patch, inject) under a real CUDA torch: the build description torch writes carries the flags in
every cxx and nvcc command. Nothing is compiled."""

from __future__ import annotations

import json
import os

import pytest
from conftest import REPO, SHARED_SDISTS, run

pytestmark = pytest.mark.slow


def _prepare(python, build_dir):
    command = [python, "-m", "fa_backend", "prepare", "--build-dir", build_dir]
    command += ["-C", f"sdist-dir={SHARED_SDISTS}", "-C", "cuda-archs=90"]
    return run(command, cwd=REPO, env=dict(os.environ))


@pytest.fixture(scope="module")
def prepared(torch211_python, tmp_path_factory):
    build_dir = tmp_path_factory.mktemp("prepare-283")
    proc = _prepare(torch211_python, build_dir)
    return json.loads(proc.stdout), proc.stderr, build_dir


def test_a_second_prepare_into_the_same_directory_starts_afresh(prepared, torch211_python):
    """The patches create files: applied over the first run's tree they would fail."""
    summary, _, build_dir = prepared
    again = json.loads(_prepare(torch211_python, build_dir).stdout)
    assert again["ninja_file"] == summary["ninja_file"]
    assert len(again["compile_commands"]) == len(summary["compile_commands"])


def test_every_compile_command_defines_torchs_abi_last(prepared):
    summary, _, _ = prepared
    commands = summary["compile_commands"]
    kinds = [c["kind"] for c in commands]
    assert kinds.count("cxx") == 1  # flash_api.cpp
    assert kinds.count("nvcc") >= 72  # the kernel translation units (more if split)
    for command in commands:
        abi = [a for a in command["args"] if a.startswith("-D_GLIBCXX_USE_CXX11_ABI=")]
        assert abi and abi[-1] == "-D_GLIBCXX_USE_CXX11_ABI=1", command["file"]
        assert [a for a in command["args"] if a.startswith("-std=")] == ["-std=c++17"]


def test_the_requested_arch_only(prepared):
    summary, _, _ = prepared
    for command in summary["compile_commands"]:
        if command["kind"] == "nvcc":
            gencodes = [
                command["args"][i + 1] for i, a in enumerate(command["args"]) if a == "-gencode"
            ]
            assert gencodes == ["arch=compute_90,code=sm_90"], command["file"]
    assert summary["provenance"]["cuda_archs"] == ["90"]


def test_preparation_verified_the_pin_and_compiled_nothing(prepared):
    summary, stderr, build_dir = prepared
    assert "sha256 d0f9f0b08a98… verified" in stderr
    assert summary["provenance"]["sdist"]["pinned"] is True
    assert summary["wheel"].startswith("flash_attn-2.8.3.post2+cu130torch2.11cxx11abiTRUE-cp")
    assert not list(build_dir.rglob("*.o")), "preparation must not compile"
    assert summary["provenance"]["nvcc"]["version"] == "13.0"
