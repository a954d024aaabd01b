"""The core's user-facing errors that need the CUDA 13.0 torch 2.11 venv (the session's),
triggered for real: no nvcc, an nvcc of the wrong major named or first on PATH, and the fix for
a missing setuptools that keeps torch's own constraint. The others: tests/integration/
test_errors.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, SHARED_SDISTS, TOOLS, make_venv, run
from conftest import build_wheel_error as build_wheel

SDIST = SHARED_SDISTS / "flash_attn-2.8.3.post2.tar.gz"  # the default release's


@pytest.mark.slow
def test_nvcc_not_found(torch211_python, tmp_path):
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs a private mount namespace (unshare -m) to hide /usr/local/cuda*")
    # hide every CUDA toolkit of this machine: /usr/local/{bin/nvcc,cuda,cuda-13.0}
    path = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if not p.startswith("/usr/local")
    )
    err = build_wheel(
        torch211_python,
        tmp_path,
        {"sdist": str(SDIST), "cuda-toolkit": "system"},
        env={"PATH": path, "CUDA_HOME": "", "CUDA_PATH": ""},
        prefix=["unshare", "-m", "sh", "-c", 'mount -t tmpfs none /usr/local && exec "$@"', "sh"],
    )
    assert "nvcc not found (looked at CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda*)" in err
    assert "install the CUDA toolkit 13.0" in err


def _fake_cuda_home(tmp_path: Path) -> Path:
    home = tmp_path / "cuda-11.5"
    (home / "bin").mkdir(parents=True)
    shutil.copy(TOOLS / "nvcc-11.5", home / "bin" / "nvcc")
    return home


@pytest.mark.slow
def test_nvcc_named_by_cuda_home_with_the_wrong_major(torch211_python, tmp_path):
    home = _fake_cuda_home(tmp_path)
    err = build_wheel(
        torch211_python, tmp_path, {"sdist": str(SDIST)}, env={"CUDA_HOME": str(home)}
    )
    assert (
        f"the nvcc named by CUDA_HOME ({home}/bin/nvcc, CUDA 11.5) does not match torch "
        "2.11.0+cu130, which was built with CUDA 13.0" in err
    )
    assert "nvcc found:" in err and "(CUDA 13.0, from" in err  # the list of what was found
    assert "CUDA_HOME=/usr/local/cuda-13.0 or -C nvcc=/usr/local/cuda-13.0/bin/nvcc" in err


@pytest.mark.slow
def test_wrong_nvcc_first_on_path_is_skipped_for_a_matching_one(torch211_python, tmp_path):
    home = _fake_cuda_home(tmp_path)
    env = {**os.environ, "PATH": f"{home / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("CUDA_HOME", None)
    proc = run(
        [
            torch211_python,
            "-m",
            "fa_backend",
            "prepare",
            "--build-dir",
            tmp_path / "b",
            "-C",
            f"sdist={SDIST}",
            "-C",
            "cuda-archs=90",
        ],
        cwd=REPO,
        env=env,
    )
    assert f"skipping {home}/bin/nvcc (CUDA 11.5, from PATH)" in proc.stderr
    assert "using nvcc" in proc.stderr and "(CUDA 13.0" in proc.stderr


@pytest.mark.slow
def test_missing_setuptools_fix_keeps_torchs_own_constraint(torch211_python, tmp_path):
    """The newcomer's venv: its own setuptools 65.5 (ensurepip) in front of torch 2.11, which
    requires setuptools<82. The printed fix must not install a setuptools torch refuses; pip
    itself, asked the fix with --dry-run, picks one torch accepts."""
    python = make_venv(tmp_path / "newcomer", [])  # with_pip: setuptools 65.5 of Python 3.11
    site = run([torch211_python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    Path(purelib.stdout.strip(), "torch211.pth").write_text(site.stdout.strip() + "\n")
    own = run([python, "-c", "import setuptools; print(setuptools.__version__)"]).stdout.strip()
    if int(own.split(".")[0]) >= 70:
        pytest.skip(f"this Python's ensurepip brings setuptools {own}, not an old one")
    err = build_wheel(python, tmp_path, {"sdist": str(SDIST)})
    assert f"setuptools>=70 (found {own})" in err
    assert f"fix: {python} -m pip install 'setuptools<82,>=70'" in err
    assert "keeps setuptools<82 from torch 2.11.0" in err
    fix = err.split("fix: ", 1)[1].split(" (keeps", 1)[0]
    dry = run([*fix.split()[:4], "--dry-run", *(a.strip("'") for a in fix.split()[4:])])
    chosen = re.search(r"Would install .*\bsetuptools-(\d+)\.", dry.stdout)
    assert chosen and 70 <= int(chosen.group(1)) < 82, dry.stdout
