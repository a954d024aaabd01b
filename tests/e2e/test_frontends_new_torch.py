"""The caches of pip and uv when the torch changes (docs/guides/frontends.md): fa-shim as a
dependency, built for this machine's CPU torch 2.13 and then for "a new torch", the CUDA 13.0
torch 2.11 of the session's venv (seen through a .pth file, never installed into). The frontends
on the sample sdist with one torch: tests/integration/test_frontends.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    BUILD_TOOLS,
    HOST_LABEL,
    SAMPLE_VERSION,
    T211_LABEL,
    make_venv,
    run,
    sample_settings,
)
from conftest import flash_attn_version as _flash_attn_version
from conftest import run_sample as _sample
from conftest import sample_env as _sample_env
from conftest import uv_project as _uv_project

pytestmark = pytest.mark.slow


@pytest.fixture
def env(frontend_env):
    return frontend_env


@pytest.fixture
def torch211_overlay(torch211_python, tmp_path) -> Path:
    """A venv of this Python that sees the torch 2.11 venv's packages through a .pth file (so
    tests never install anything into that shared venv) and has fa-shim's build tools."""
    python = make_venv(tmp_path / "t211", BUILD_TOOLS)
    code = "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))"
    site = run([torch211_python, "-c", code]).stdout.strip().splitlines()[-1]
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    Path(purelib.stdout.strip(), "torch211.pth").write_text(site + "\n")
    assert run([python, "-c", "import torch; print(torch.__version__)"]).stdout.startswith("2.11")
    return python


def _git_clone_at_commit(source: Path, path: Path) -> str:
    """The checkout as a git repository; returns the commit (what a consumer pins)."""
    shutil.copytree(source, path)
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "fa-shim"], check=True)
    return subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def _torch_version(python) -> str:
    return run([python, "-c", "import torch; print(torch.__version__)"]).stdout.strip()


def test_pip_wheel_cache_and_a_new_torch(
    host_venv, torch211_overlay, fa_shim, sample_sdist_dir, tmp_path, env
):
    """pip caches a wheel it built from a git URL pinned to a commit (or any archive URL; and,
    before pip PR #14080, mid 2026, from a *named* local directory, which on Python 3.11's pip
    23.2.1 takes this very path: not run twice here); the key is the URL and the Python version
    only. Another environment with another torch then gets the first one's wheel, as the
    version label shows. --no-cache-dir, or `pip cache remove flash_attn`, makes pip call fa-shim
    again, which builds for the torch it finds."""
    env = {**env, **_sample_env(sample_sdist_dir)}
    commit = _git_clone_at_commit(fa_shim, tmp_path / "repo" / "fa-shim")
    # PEP 508 form, as in a project's dependencies (pip wants a host in git+file URLs)
    requirement = f"flash-attn @ git+file://localhost{tmp_path}/repo/fa-shim@{commit}"

    run([host_venv, "-m", "pip", "install", requirement], env=env)
    assert _flash_attn_version(host_venv) == f"{SAMPLE_VERSION}+{HOST_LABEL}"

    out = run([torch211_overlay, "-m", "pip", "install", requirement], env=env).stdout
    assert f"Using cached flash_attn-{SAMPLE_VERSION}+{HOST_LABEL}" in out
    assert _flash_attn_version(torch211_overlay) == f"{SAMPLE_VERSION}+{HOST_LABEL}"
    # the stale wheel requires the torch it was built for (torch==2.13.0+cpu), and pip installs
    # that torch into this environment, over the 2.11 it had: the README warns of it
    assert "torch-2.13.0" in out.splitlines()[-1], out.splitlines()[-1]
    assert _torch_version(torch211_overlay).startswith("2.13.0")
    run([torch211_overlay, "-m", "pip", "uninstall", "-y", "-q", "torch"], env=env)
    assert _torch_version(torch211_overlay).startswith("2.11.0")  # the .pth one again

    reinstall = [torch211_overlay, "-m", "pip", "install", "--force-reinstall", "--no-deps"]
    out = run([*reinstall, "--no-cache-dir", requirement], env=env).stdout
    assert "Building wheel for flash-attn" in out
    assert _flash_attn_version(torch211_overlay) == f"{SAMPLE_VERSION}+{T211_LABEL}"

    run([torch211_overlay, "-m", "pip", "cache", "remove", "flash_attn"], env=env)
    out = run([*reinstall, requirement], env=env).stdout
    assert "Using cached" not in out and "Building wheel for flash-attn" in out
    assert _flash_attn_version(torch211_overlay) == f"{SAMPLE_VERSION}+{T211_LABEL}"


def test_pip_rebuilds_an_unnamed_local_directory_every_time(
    host_venv, torch211_overlay, fa_shim, sample_sdist_dir, tmp_path, env
):
    """`pip install ./fa-shim`: pip does not know the name before building, so it never looks
    in its wheel cache, even where it stores the wheel there (pip 23.2.1)."""
    settings = sample_settings(sample_sdist_dir)
    run([host_venv, "-m", "pip", "install", fa_shim, *settings], env=env)
    out = run([torch211_overlay, "-m", "pip", "install", fa_shim, *settings], env=env).stdout
    assert "Using cached" not in out and "Building wheel for flash" in out
    assert _flash_attn_version(torch211_overlay) == f"{SAMPLE_VERSION}+{T211_LABEL}"


def test_uv_cache_serves_a_stale_wheel_until_reinstall_package(
    torch211_overlay, fa_shim, sample_sdist_dir, tmp_path, env, torch_index
):
    """uv caches wheels built from a local directory by the directory and its pyproject.toml
    (cache-keys), not by the torch the build saw. A project with another torch then installs
    the first build; `uv sync --reinstall-package flash-attn` rebuilds."""
    env = {**env, **_sample_env(sample_sdist_dir), "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    # torch 2.11 (through the .pth) is not in uv's view of that venv: --no-deps
    run(
        [
            "uv",
            "pip",
            "install",
            "--python",
            torch211_overlay,
            "--no-build-isolation",
            "--no-deps",
            fa_shim,
        ],
        env=env,
    )
    assert _flash_attn_version(torch211_overlay) == f"{SAMPLE_VERSION}+{T211_LABEL}"

    project = _uv_project(tmp_path / "app", fa_shim, torch_index, no_build_isolation=True)
    run(["uv", "sync", "--python", sys.executable], cwd=project, env=env)
    python = project / ".venv" / "bin" / "python"
    assert _flash_attn_version(python) == f"{SAMPLE_VERSION}+{T211_LABEL}"  # stale

    run(["uv", "sync", "--reinstall-package", "flash-attn"], cwd=project, env=env)
    assert _sample(python)["version"] == f"{SAMPLE_VERSION}+{HOST_LABEL}"
