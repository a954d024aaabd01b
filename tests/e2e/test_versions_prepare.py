"""Every supported upstream release, prepared for real: the pinned sdist (fetched from a local
directory), the vendored patches, fa-shim's injected flags, and the build.ninja torch writes,
under the CUDA torch venvs of the session (2.11, and 2.6 with the old ABI); the sample under
each torch, this interpreter's CPU 2.13 included.

`python -m fa_backend prepare` runs the pipeline up to the point where torch has written
build.ninja (nothing is compiled), through the interpreter of a venv with a real torch; the
compile commands it prints are what ninja would run. See docs/upstream-versions.md. The pins:
tests/unit/flavours/fa2/test_versions.py; the patches: tests/integration/test_patches_apply.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import PY, REPO, SAMPLE_VERSION, SUPPORTED, run, sample_settings

from fa_backend.flavours.fa2 import _releases

ABI = "-D_GLIBCXX_USE_CXX11_ABI="


def _prepare(python: Path, tmp_path: Path, *config: str, check: bool = True):
    args = [python, "-m", "fa_backend", "prepare", "--build-dir", tmp_path / "build"]
    for item in config:
        args += ["-C", item]
    proc = run(args, cwd=REPO, check=check)
    return proc if not check else (json.loads(proc.stdout), proc.stderr)


def _upstream_sources(source: Path) -> list[str]:
    """The CUDA extension's sources as upstream's setup.py lists them (the oracle)."""
    setup = (source / "setup.py").read_text()
    cuda_part = setup.split("elif not SKIP_CUDA_BUILD and IS_ROCM")[0]
    return re.findall(r'"(csrc/flash_attn/(?:src/)?[\w.]+\.(?:cu|cpp))"', cuda_part)


def _check_commands(commands: list[dict], abi: int, std: str) -> None:
    assert commands
    for c in commands:
        name = c["file"].rsplit("/", 1)[-1]
        abis = [a for a in c["args"] if a.startswith(ABI)]
        assert abis and abis[-1] == f"{ABI}{abi}", (name, abis)
        stds = [a for a in c["args"] if re.fullmatch(r"-std=(c|gnu)\+\+\d+", a)]
        assert stds == [f"-std={std}"], (name, stds)
        # fa-shim's flags come after every flag of upstream's own (they win)
        assert c["args"].index(stds[0]) > max(
            (i for i, a in enumerate(c["args"]) if a in ("-O3", "--use_fast_math")), default=-1
        ), name


def _gencodes(command: dict) -> list[str]:
    args = command["args"]
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == "-gencode"]


@pytest.mark.slow
@pytest.mark.parametrize("version", SUPPORTED)
@pytest.mark.cell(
    flavour="FA2, every release", torch="2.11.0+cu130", nvcc="13.0", abi="TRUE", stage="prepare"
)
def test_prepare_under_torch_2_11(version, torch211_python, upstream_sdists, tmp_path):
    summary, log = _prepare(
        torch211_python,
        tmp_path,
        f"flash-attn-version={version}",
        f"sdist-dir={upstream_sdists}",
        "offline=true",
        "cuda-archs=90",
    )
    prov = summary["provenance"]
    assert prov["sdist"]["pinned"] is True
    assert prov["sdist"]["sha256"] == _releases.release(version).sha256
    assert [p["name"] for p in prov["patches"]] == [p.name for p in _releases.patches(version)]
    assert prov["torch"]["version"].startswith("2.11.0")
    assert summary["wheel"].startswith(f"flash_attn-{version}+cu130torch2.11cxx11abiTRUE-cp")

    commands = summary["compile_commands"]
    expected = _upstream_sources(Path(summary["source"]))
    assert sorted(c["file"].split(Path(summary["source"]).name + "/", 1)[1] for c in commands) == (
        sorted(expected)
    )
    assert [c["kind"] for c in commands].count("cxx") == 1  # flash_api.cpp
    _check_commands(commands, abi=1, std="c++17")
    for c in commands:
        if c["kind"] == "nvcc":
            assert _gencodes(c) == ["arch=compute_90,code=sm_90"], c["file"]
    nvcc_args = next(c["args"] for c in commands if c["kind"] == "nvcc")
    if version == "2.8.1":  # 01-compress-mode.patch keeps them for nvcc >= 12.8 (13.0 here)
        assert "-compress-mode=size" in nvcc_args
    assert "fatal: not a git repository" not in Path(_log_path(log)).read_text()


def _log_path(stderr: str) -> str:
    return re.search(r"full log: (\S+\.log)", stderr).group(1)


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2.8.1"])  # 2.8.3.post2: compiled, test_cuda12_builds
@pytest.mark.cell(
    flavour="FA2 2.8.1",
    torch="2.6.0+cu124",
    nvcc="12.4",
    abi="FALSE",
    stage="prepare",
)
def test_prepare_under_torch_2_6_old_abi(
    version, torch26_python, cuda12_home, upstream_sdists, tmp_path
):
    """torch 2.6 is built with _GLIBCXX_USE_CXX11_ABI=0 and C++17: every command follows it."""
    summary, _ = _prepare(
        torch26_python,
        tmp_path,
        f"flash-attn-version={version}",
        f"sdist-dir={upstream_sdists}",
        "offline=true",
        "cuda-archs=90",
        f"nvcc={cuda12_home / 'bin' / 'nvcc'}",
    )
    assert summary["wheel"].startswith(f"flash_attn-{version}+cu124torch2.6cxx11abiFALSE-cp")
    commands = summary["compile_commands"]
    _check_commands(commands, abi=0, std="c++17")
    for c in commands:
        if c["kind"] == "nvcc":
            assert _gencodes(c) == ["arch=compute_90,code=sm_90"], c["file"]
            # 2.8.1's -compress-mode=size is unknown to nvcc 12.4 (01-compress-mode.patch)
            assert "-compress-mode=size" not in c["args"]


# The -std each torch's cpp_extension compiles extensions with (read off torch/utils/
# cpp_extension.py of each release by hand; fa-shim reads it from torch at build time).
TORCH_STD = {"2.6": "c++17", "2.11": "c++17", "2.13": "c++20"}


@pytest.mark.parametrize(
    ("torch_fixture", "abi", "std"),
    [
        pytest.param(None, 1, TORCH_STD["2.13"], id="torch-2.13-cpu"),
        pytest.param(
            "torch211_python",
            1,
            TORCH_STD["2.11"],
            id="torch-2.11",
            marks=[pytest.mark.slow, pytest.mark.cuda_torch],
        ),
        pytest.param(
            "torch26_python",
            0,
            TORCH_STD["2.6"],
            id="torch-2.6",
            marks=[pytest.mark.slow, pytest.mark.cuda_torch],
        ),
    ],
)
def test_sample_follows_torch_std_and_abi(
    torch_fixture, abi, std, request, sample_sdist_dir, tmp_path
):
    """The sample asks for -std=c++17 itself: fa-shim raises it to what torch needs (C++20 for
    torch 2.13's headers) and never lowers it; the ABI define is torch's."""
    python = request.getfixturevalue(torch_fixture) if torch_fixture else PY
    summary, _ = _prepare(python, tmp_path, *sample_settings(sample_sdist_dir)[1::2])
    assert summary["wheel"].startswith(f"flash_attn-{SAMPLE_VERSION}+")
    assert summary["provenance"]["torch"]["cxx_std"] == std
    _check_commands(summary["compile_commands"], abi=abi, std=std)
