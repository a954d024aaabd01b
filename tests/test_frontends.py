"""fa-shim as a dependency, end to end through the frontends people use, on the sample sdist.

pip --no-build-isolation and `python -m build --no-isolation` are in test_e2e_sample.py, pip's
isolated build in test_isolation.py. Here: `pip wheel`, `uv pip install --no-build-isolation`,
uv projects (no-build-isolation-package; match-runtime), a pip consumer project depending on
`flash-attn @ file://...`, a consumer of plain `flash-attn>=0.1`, and the caches of pip and uv
when the torch changes (see README, "Use fa-shim from your project").

Settings reach the backend the way each frontend passes them: -C for pip and uv pip, FA_SHIM_*
variables or [tool.uv] config-settings-package for uv projects.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BUILD_TOOLS, PY, SAMPLE_VERSION, copy_repo, make_venv, run, sample_settings
from packaging.version import Version

pytestmark = pytest.mark.slow

HOST_LABEL = "cputorch2.13cxx11abiTRUE"  # the machine's torch 2.13.0+cpu
T211_LABEL = "cu130torch2.11cxx11abiTRUE"  # torch 2.11.0 from PyPI (CUDA 13.0)

SAMPLE_RUNS = """
import importlib.metadata as m, json
import flash_attn, flash_attn_2_cuda, torch
assert flash_attn.check_head_dim(64) == 64
print(json.dumps({"version": m.version("flash-attn"), "abi": flash_attn_2_cuda.cxx11_abi(),
                  "torch": torch.__version__, "torch_file": torch.__file__}))
"""


def _sample(python) -> dict:
    return json.loads(run([python, "-c", SAMPLE_RUNS]).stdout.strip().splitlines()[-1])


def _flash_attn_version(python) -> str:
    code = "import importlib.metadata as m; print(m.version('flash-attn'))"
    return run([python, "-c", code]).stdout.strip()


def _sample_env(sdist_dir: Path) -> dict[str, str]:
    return {
        "FA_SHIM_FLASH_ATTN_VERSION": SAMPLE_VERSION,
        "FA_SHIM_SDIST_DIR": str(sdist_dir),
        "FA_SHIM_ALLOW_UNKNOWN_VERSION": "true",
    }


@pytest.fixture(scope="session")
def uv_cache(tmp_path_factory) -> Path:
    """One uv cache for these tests: never the user's, so no wheel from elsewhere is served."""
    if not shutil.which("uv"):
        pytest.skip("uv is not installed")
    return tmp_path_factory.mktemp("uv-cache")


@pytest.fixture
def env(tmp_path, uv_cache):
    """Private pip cache per test, the session's uv cache, no Python downloads."""
    return {
        **os.environ,
        "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),
        "UV_CACHE_DIR": str(uv_cache),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_PROGRESS": "1",
    }


@pytest.fixture
def fa_shim(tmp_path) -> Path:
    """A copy of the checkout, named like a clone (pip's wheel cache looks at the name)."""
    return copy_repo(tmp_path / "fa-shim")


@pytest.fixture(scope="session")
def cpu_torch_wheel() -> Path:
    """The wheel file of the machine's torch 2.13.0+cpu, so uv environments get it offline."""
    import torch

    dirs = [*os.environ.get("PIP_FIND_LINKS", "").split(), "/opt/wheels"]
    for directory in dirs:
        found = sorted(Path(directory).glob(f"torch-{torch.__version__}-*.whl"))
        if found:
            return found[0]
    pytest.skip(f"no wheel of torch {torch.__version__} on this machine (looked in {dirs})")


@pytest.fixture(scope="session")
def torch_index(cpu_torch_wheel, tmp_path_factory) -> str:
    """A PEP 503 index serving only that torch wheel, for uv projects ([[tool.uv.index]])."""
    root = tmp_path_factory.mktemp("torch-index")
    page = root / "torch" / "index.html"
    page.parent.mkdir()
    digest = hashlib.sha256(cpu_torch_wheel.read_bytes()).hexdigest()
    page.write_text(
        f'<html><body><a href="{cpu_torch_wheel.as_uri()}#sha256={digest}">'
        f"{cpu_torch_wheel.name}</a></body></html>\n"
    )
    return root.as_uri()


def _uv_venv_with_torch(path: Path, wheel: Path, env: dict) -> Path:
    """A uv venv holding the CPU torch and fa-shim's build tools (uv ignores system site-packages
    when it decides what is installed, so torch must be in the venv itself)."""
    run(["uv", "venv", "-q", "--python", sys.executable, path], env=env)
    python = path / "bin" / "python"
    run(["uv", "pip", "install", "-q", "--python", python, wheel, *BUILD_TOOLS], env=env)
    return python


# ---------------------------------------------------------------------------------- pip


def test_pip_wheel_builds_an_installable_wheel_for_this_torch(
    fa_shim, sample_sdist_dir, tmp_path, env
):
    out = tmp_path / "wheels"
    run(
        [
            PY,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-w",
            out,
            fa_shim,
            *sample_settings(sample_sdist_dir),
        ],
        env=env,
    )
    wheels = [p.name for p in out.glob("*.whl")]
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert wheels == [f"flash_attn-{SAMPLE_VERSION}+{HOST_LABEL}-{tag}-{tag}-linux_x86_64.whl"]
    target = make_venv(tmp_path / "target", [], system_site_packages=True)
    run([target, "-m", "pip", "install", "--no-deps", out / wheels[0]], env=env)
    assert _sample(target)["version"] == f"{SAMPLE_VERSION}+{HOST_LABEL}"


def _consumer(path: Path, dependencies: list[str]) -> Path:
    """A project of the user's that depends on flash-attn (setuptools, one empty module)."""
    path.mkdir(parents=True)
    (path / "consumer_app.py").write_text("")
    deps = ", ".join(json.dumps(d) for d in dependencies)
    (path / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = ["setuptools>=70"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        "[project]\n"
        f'name = "{path.name}"\n'
        'version = "1.0"\n'
        f"dependencies = [{deps}]\n\n"
        "[tool.setuptools]\n"
        'py-modules = ["consumer_app"]\n'
    )
    return path


def test_pip_consumer_with_a_file_url_dependency_then_a_plain_requirement(
    host_venv, fa_shim, sample_sdist_dir, tmp_path, env
):
    """`flash-attn @ file:///path/to/fa-shim` in a project: pip builds fa-shim in isolation
    (settings from FA_SHIM_*), against the venv's torch. A second project that only asks for
    `flash-attn>=0.1` is then satisfied by the installed wheel: nothing is built again."""
    env = {**env, **_sample_env(sample_sdist_dir)}
    app = _consumer(tmp_path / "app", [f"flash-attn @ {fa_shim.as_uri()}"])
    out = run([host_venv, "-m", "pip", "install", "-v", app], env=env)
    assert "found past the isolated build environment" in out.stdout + out.stderr
    ran = _sample(host_venv)
    assert ran["version"] == f"{SAMPLE_VERSION}+{HOST_LABEL}"

    record = next(host_venv.parent.parent.glob("lib/python*/site-packages/flash_attn-*.dist-info"))
    stamp = (record / "RECORD").stat().st_mtime_ns
    other = _consumer(tmp_path / "other-app", ["flash-attn>=0.1"])
    out = run([host_venv, "-m", "pip", "install", other], env=env)
    assert "Requirement already satisfied: flash-attn>=0.1" in out.stdout
    assert "Building wheel for flash" not in out.stdout
    assert (record / "RECORD").stat().st_mtime_ns == stamp


# ----------------------------------------------------------------------------------- uv


def test_uv_pip_install_no_build_isolation(
    fa_shim, sample_sdist_dir, tmp_path, env, cpu_torch_wheel
):
    python = _uv_venv_with_torch(tmp_path / "venv", cpu_torch_wheel, env)
    before = _sample_torch(python)
    out = run(
        [
            "uv",
            "pip",
            "install",
            "--python",
            python,
            "--no-build-isolation",
            fa_shim,
            *sample_settings(sample_sdist_dir),
        ],
        env=env,
    )
    assert f"flash-attn=={SAMPLE_VERSION}+{HOST_LABEL.lower()}" in out.stderr
    ran = _sample(python)
    assert ran["version"] == f"{SAMPLE_VERSION}+{HOST_LABEL}"
    assert (ran["torch"], ran["torch_file"]) == before


def _sample_torch(python) -> tuple[str, str]:
    code = "import torch; print(torch.__version__); print(torch.__file__)"
    version, path = run([python, "-c", code]).stdout.strip().splitlines()[-2:]
    return version, path


def _uv_project(
    path: Path, fa_shim: Path, torch_index: str, *, no_build_isolation: bool, extra: str = ""
) -> Path:
    """A uv project with torch from `torch_index` and flash-attn from the fa-shim checkout.

    fa-shim's metadata is dynamic (its version carries the torch label), so uv would have to
    build it just to resolve; `dependency-metadata` gives uv the static part instead. Without
    build isolation, fa-shim's build requirements are project dependencies, which uv installs
    (with torch) before it builds flash-attn in the project's environment.
    """
    import torch

    path.mkdir(parents=True)
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    deps = [f"torch=={torch.__version__}", "flash-attn"]
    uv = [
        "package = false",
        "environments = [\"sys_platform == 'linux' and platform_machine == 'x86_64'\"]",
    ]
    if no_build_isolation:
        deps += BUILD_TOOLS
        uv.append('no-build-isolation-package = ["flash-attn"]')
    (path / "pyproject.toml").write_text(
        "[project]\n"
        'name = "app"\n'
        'version = "1.0"\n'
        f'requires-python = "=={py}.*"\n'
        f"dependencies = {json.dumps(deps)}\n\n"
        "[tool.uv]\n" + "\n".join(uv) + "\n\n"
        "[[tool.uv.index]]\n"
        'name = "local-torch"\n'
        f'url = "{torch_index}"\n'
        "explicit = true\n\n"
        "[tool.uv.sources]\n"
        'torch = { index = "local-torch" }\n'
        f'flash-attn = {{ path = "{fa_shim}" }}\n\n'
        "[[tool.uv.dependency-metadata]]\n"
        'name = "flash-attn"\n'
        f'version = "{SAMPLE_VERSION}"\n'
        'requires-dist = ["torch"]\n\n' + extra
    )
    return path


def test_uv_project_no_build_isolation_package(
    fa_shim, sample_sdist_dir, tmp_path, env, torch_index
):
    """The project's torch and fa-shim's build tools are installed first, then flash-attn is
    built in the project's .venv (settings from FA_SHIM_* variables)."""
    project = _uv_project(tmp_path / "app", fa_shim, torch_index, no_build_isolation=True)
    env = {**env, **_sample_env(sample_sdist_dir)}
    run(["uv", "sync", "--python", sys.executable], cwd=project, env=env)
    python = project / ".venv" / "bin" / "python"
    assert _sample(python)["version"] == f"{SAMPLE_VERSION}+{HOST_LABEL}"


def test_uv_project_match_runtime_builds_in_isolation_against_the_project_torch(
    fa_shim, sample_sdist_dir, tmp_path, env, torch_index
):
    """uv installs the project's exact torch into flash-attn's build environment; fa-shim finds
    it there (settings from [tool.uv.config-settings-package])."""
    extra = (
        "[tool.uv.extra-build-dependencies]\n"
        'flash-attn = [{ requirement = "torch", match-runtime = true }]\n\n'
        "[tool.uv.config-settings-package]\n"
        f'flash-attn = {{ flash-attn-version = "{SAMPLE_VERSION}", '
        f'sdist-dir = "{sample_sdist_dir}", allow-unknown-version = "true" }}\n'
    )
    project = _uv_project(
        tmp_path / "app", fa_shim, torch_index, no_build_isolation=False, extra=extra
    )
    run(["uv", "sync", "--python", sys.executable], cwd=project, env=env)
    python = project / ".venv" / "bin" / "python"
    ran = _sample(python)
    assert ran["version"] == f"{SAMPLE_VERSION}+{HOST_LABEL}"
    assert ran["torch_file"].startswith(str(project / ".venv"))


# ---------------------------------------------------------------- caches and a new torch


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


def _pip_version(python) -> Version:
    return Version(run([python, "-m", "pip", "--version"]).stdout.split()[1])


@pytest.mark.parametrize("source", ["git-commit", "file-url"])
def test_pip_wheel_cache_and_a_new_torch(
    source, host_venv, torch211_overlay, fa_shim, sample_sdist_dir, tmp_path, env
):
    """pip caches a wheel it built from a git URL pinned to a commit (or any archive URL), and,
    before pip PR #14080 (mid 2026), from a *named* local directory (`flash-attn @ file:///...`,
    when the path looks like name-version, e.g. ".../fa-shim"); the key is the URL and the Python
    version only. Another environment with another torch then gets the first one's wheel, as the
    version label shows. --no-cache-dir, or `pip cache remove flash_attn`, makes pip call fa-shim
    again, which builds for the torch it finds."""
    env = {**env, **_sample_env(sample_sdist_dir)}
    if source == "git-commit":
        commit = _git_clone_at_commit(fa_shim, tmp_path / "repo" / "fa-shim")
        # PEP 508 form, as in a project's dependencies (pip wants a host in git+file URLs)
        requirement = f"flash-attn @ git+file://localhost{tmp_path}/repo/fa-shim@{commit}"
        stale_expected = True
    else:
        requirement = f"flash-attn @ {fa_shim.as_uri()}"
        stale_expected = _pip_version(torch211_overlay) < Version("26.2")  # 23.2.1: stale

    run([host_venv, "-m", "pip", "install", requirement], env=env)
    assert _flash_attn_version(host_venv) == f"{SAMPLE_VERSION}+{HOST_LABEL}"

    out = run([torch211_overlay, "-m", "pip", "install", requirement], env=env).stdout
    if stale_expected:
        assert f"Using cached flash_attn-{SAMPLE_VERSION}+{HOST_LABEL}" in out
        assert _flash_attn_version(torch211_overlay) == f"{SAMPLE_VERSION}+{HOST_LABEL}"
        # the stale wheel requires the torch it was built for (torch==2.13.0), and pip installs
        # that torch into this environment, over the 2.11 it had: the README warns of it
        assert "torch-2.13.0" in out.splitlines()[-1], out.splitlines()[-1]
        assert _torch_version(torch211_overlay).startswith("2.13.0")
        run([torch211_overlay, "-m", "pip", "uninstall", "-y", "-q", "torch"], env=env)
        assert _torch_version(torch211_overlay).startswith("2.11.0")  # the .pth one again
    else:
        assert "Using cached" not in out
        assert _flash_attn_version(torch211_overlay) == f"{SAMPLE_VERSION}+{T211_LABEL}"

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
