"""The real hopper/setup.py of flash-attention v2.8.3 (from ../shared/fa3), run under fa-shim's
network seal with the CUDA torch 2.11 venv (the session's) and nvcc 13.0: as upstream has it, it
goes for NVIDIA's nvcc and runs git; patched with vendored_patches/fa3/2.8.3/, it downloads
nothing and runs no git. That the patches apply strictly and what they leave in the file:
tests/integration/test_fa3_patches.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fa_backend.flavours.fa3 import _releases as _fa3_releases
from fa_backend.pipeline import _seal
from fa_backend.sources import _patches

RELEASE = _fa3_releases.release("2.8.3")


def _tree(fa3_trees: dict[str, Path], dest: Path, patched: bool) -> Path:
    """The hopper tree as a checkout has it (LICENSE, hopper/), patched or as upstream has it."""
    shutil.copytree(fa3_trees["hopper"], dest)
    if patched:
        _patches.apply_all(_patches.read(RELEASE.patches), dest)
    return dest


def _run_setup(python: Path, hopper: Path, home: Path, tripwire: Path) -> tuple[int, str, str]:
    """`setup.py --version` through its CUDA block, sealed off the network; a `git` first on PATH
    records any call."""
    bin_dir = tripwire.parent
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "git").write_text(f'#!/bin/sh\necho "$@" >> {tripwire}\n')
    (bin_dir / "git").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}/usr/local/cuda-13.0/bin{os.pathsep}{os.environ['PATH']}",
        "CUDA_HOME": "/usr/local/cuda-13.0",
        "FLASH_ATTENTION_HOME": str(home),  # where upstream caches a downloaded nvcc
    }
    for name in ("FLASH_ATTENTION_SKIP_CUDA_BUILD", "FLASH_ATTENTION_OFFLINE_BUILD"):
        env.pop(name, None)
    with _seal.sealed([str(python), "setup.py", "--version"], env) as (command, env):
        proc = subprocess.run(command, cwd=hopper, env=env, capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_patched_setup_py_downloads_nothing_and_runs_no_git(fa3_trees, torch211_python, tmp_path):
    if not Path("/usr/local/cuda-13.0/bin/nvcc").is_file():
        pytest.skip("needs nvcc 13.0 in /usr/local/cuda-13.0 (setup.py asks nvcc -V)")
    # upstream as it is (with the README it reads): it goes for NVIDIA's nvcc and runs git
    upstream = _tree(fa3_trees, tmp_path / "upstream", patched=False)
    (upstream / "README.md").write_text("readme\n")
    code, out, err = _run_setup(
        torch211_python, upstream / "hopper", tmp_path / "home1", tmp_path / "git1"
    )
    assert code != 0  # sealed: the download fails
    assert "downloading and extracting https://developer.download.nvidia.com/" in out, out + err
    assert "submodule update --init ../csrc/cutlass" in (tmp_path / "git1").read_text()

    patched = _tree(fa3_trees, tmp_path / "patched", patched=True)
    code, out, err = _run_setup(
        torch211_python, patched / "hopper", tmp_path / "home2", tmp_path / "git2"
    )
    assert code == 0, out + err
    assert "torch.__version__  = 2.11.0" in out  # it went through the CUDA block
    assert out.split()[-1] == "3.0.0b1", out
    assert "downloading" not in out + err
    assert not (tmp_path / "git2").exists()  # no git at all
    assert not (tmp_path / "home2").exists() and not (patched / "third_party").exists()
