"""vendored_patches/fa3/main-0251105a/*.patch on the real hopper/ of flash-attention main at
0251105a (from ../shared/fa3): they apply strictly, and the patched setup.py downloads nothing
and runs no git, shown by reading it and by running it under fa-shim's network seal with a `git`
tripwire. nvcc 13.0 never reaches upstream's nvcc download at this commit (it fetches for
12.3 <= nvcc < 13, but 12.8), so the runs use an nvcc 12.6 stand-in (tests/tools/nvcc-12.6)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import FA3_SHARED, TOOLS

from fa_backend.core._errors import FaShimError
from fa_backend.flavours.fa3 import _releases, _sources, _trees
from fa_backend.pipeline import _seal
from fa_backend.sources import _patches

LINE = _releases.release("main-0251105a")
DOC_URLS = {
    "https://ninja-build.org/build.ninja.html",
    "https://hub.docker.com/r/pytorch/pytorch,",
    "https://github.com/pytorch/pytorch/blob/8472c24e3b5b60150096486616d98b7bea01500b/torch/"
    "utils/cpp_extension.py#L920",
}


@pytest.fixture(scope="module")
def hopper_tree(tmp_path_factory) -> Path:
    """main at 0251105a's hopper tree (LICENSE + hopper/), extracted once; copy it to change."""
    tarball = FA3_SHARED / _sources.archive_name(LINE, _trees.HOPPER)
    if not tarball.is_file():
        pytest.skip(f"{tarball} is absent: these tests seed from ../shared/fa3 only")
    assert _trees.pin_of(tarball, _trees.HOPPER) == LINE.hopper_pin
    dest = tmp_path_factory.mktemp("fa3-main")
    with tarfile.open(tarball) as tar:
        tar.extractall(dest, filter="data")
    (root,) = dest.iterdir()
    return root


def _tree(hopper_tree: Path, dest: Path, patched: bool) -> Path:
    shutil.copytree(hopper_tree, dest)
    if patched:
        _patches.apply_all(_patches.read(LINE.patches), dest)
    return dest


def test_each_patch_states_its_reason_and_all_apply_strictly(hopper_tree, tmp_path):
    patches = _patches.read(LINE.patches)
    assert all(p.reason for p in patches)
    src = _tree(hopper_tree, tmp_path / "src", patched=True)
    setup = (src / "hopper" / "setup.py").read_text()
    compile(setup, "setup.py", "exec")
    assert set(re.findall(r"https?://\S+?(?=[\"')\s]|$)", setup, re.M)) == DOC_URLS
    for gone in (
        "download.nvidia.com",
        "releases/download",
        "urlretrieve",
        "urlopen",
        "download_and_copy",
        "get_flashattn_cache_path",
        "git submodule",
        '"git"',
        'os.environ["PYTORCH_NVCC"]',
    ):
        assert gone not in setup, gone
    # what fa-shim relies on is still there: the version check, CUDA 13's CCCL include path,
    # the switches (two new ones) and the stable API for torch >= 2.9
    assert 'bare_metal_version < Version("12.3")' in setup
    assert "include/cccl" in setup
    for switch in ("HDIM128", "HDIMDIFF64", "HDIMDIFF192"):
        assert f'os.getenv("FLASH_ATTENTION_DISABLE_{switch}", "FALSE")' in setup
    assert '"-DTORCH_TARGET_VERSION=0x0209000000000000"' in setup
    interface = (src / "hopper" / "flash_attn_interface.py").read_text()
    assert 'load_extension("flash_attn_3._C", "flash-attn-3")' in interface
    for api in ("flash_api_stable.cpp", "flash_api.cpp"):  # 06 guards both API files
        assert "fa-shim compiled a tailored set of head dims" in (src / "hopper" / api).read_text()
    with pytest.raises(FaShimError, match="does not apply cleanly"):  # applied twice
        _patches.apply_all(_patches.read(LINE.patches[:1]), src)


def _run_setup(python: Path, hopper: Path, tmp: Path) -> tuple[int, str, str, Path]:
    """`setup.py --version` through its CUDA block with an nvcc 12.6 as CUDA_HOME's, sealed off
    the network; a `git` first on PATH records any call."""
    cuda = tmp / "cuda-12.6"
    (cuda / "bin").mkdir(parents=True)
    shutil.copy(TOOLS / "nvcc-12.6", cuda / "bin" / "nvcc")
    tripwire = tmp / "git-calls"
    (tmp / "bin").mkdir()
    (tmp / "bin" / "git").write_text(f'#!/bin/sh\necho "$@" >> {tripwire}\n')
    (tmp / "bin" / "git").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{tmp / 'bin'}{os.pathsep}{cuda / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "CUDA_HOME": str(cuda),
        "FLASH_ATTENTION_HOME": str(tmp / "home"),  # where upstream caches a downloaded nvcc
        "HOME": str(tmp),
    }
    for name in ("FLASH_ATTENTION_SKIP_CUDA_BUILD", "FLASH_ATTENTION_OFFLINE_BUILD"):
        env.pop(name, None)
    with _seal.sealed([str(python), "setup.py", "--version"], env) as (command, env):
        proc = subprocess.run(command, cwd=hopper, env=env, capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr, tripwire


def test_patched_setup_py_downloads_nothing_and_runs_no_git(hopper_tree, torch211_python, tmp_path):
    upstream = _tree(hopper_tree, tmp_path / "upstream", patched=False)
    (upstream / "README.md").write_text("readme\n")  # what upstream's setup.py reads first
    code, out, err, git = _run_setup(torch211_python, upstream / "hopper", tmp_path / "a")
    assert code != 0  # sealed: the download fails
    assert "https://developer.download.nvidia.com/" in out + err, (out + err)[-3000:]
    assert "submodule update --init ../csrc/cutlass" in git.read_text()

    patched = _tree(hopper_tree, tmp_path / "patched", patched=True)
    code, out, err, git = _run_setup(torch211_python, patched / "hopper", tmp_path / "b")
    assert code == 0, (out + err)[-3000:]
    assert out.split()[-1] == "3.0.0", out[-3000:]  # through its CUDA block: torch 2.11
    assert "torch.__version__  = 2.11.0" in out
    assert "download.nvidia.com" not in out + err and "downloading" not in (out + err).lower()
    assert not git.exists()  # no git at all
    assert not (tmp_path / "b" / "home").exists() and not (tmp_path / "b" / ".flashattn").exists()
