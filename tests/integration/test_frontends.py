"""fa-shim as a dependency, end to end through the frontends people use, on the sample sdist.

pip --no-build-isolation and `python -m build --no-isolation` are in test_sample_install.py, pip's
isolated build in test_isolation.py. Here: `pip wheel`, `uv pip install --no-build-isolation`,
uv projects (no-build-isolation-package; match-runtime), a pip consumer project depending on
`flash-attn @ file://...` and a consumer of plain `flash-attn>=0.1`. The caches of pip and uv
when the torch changes (see docs/guides/frontends.md) need a second torch:
tests/e2e/test_frontends_new_torch.py.

Settings reach the backend the way each frontend passes them: -C for pip and uv pip, FA_SHIM_*
variables or [tool.uv] config-settings-package for uv projects.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import BUILD_TOOLS, HOST_LABEL, PY, SAMPLE_VERSION, make_venv, run, sample_settings
from conftest import run_sample as _sample
from conftest import sample_env as _sample_env
from conftest import uv_project as _uv_project

pytestmark = pytest.mark.slow


@pytest.fixture
def env(frontend_env):
    return frontend_env


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
