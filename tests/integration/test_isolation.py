"""Which torch an isolated build uses: the target environment's, found past pip's isolation
overlay, or the one the torch-python setting names; and one readable error, listing the ways out,
where a frontend builds in a virtual environment of its own and nothing names the torch.

Real pip, uv and `python -m build`, real torch; the sample sdist (C++ only) keeps builds short.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PY, REPO, SAMPLE_VERSION, copy_repo, make_venv, run, sample_settings

from fa_backend.core._errors import FaShimError
from fa_backend.toolchain import _torch

HOST_LABEL = "cputorch2.13cxx11abiTRUE"  # the machine's torch 2.13.0+cpu, new C++ ABI

TORCH_STATE = """
import importlib.metadata as m, json, torch
print(json.dumps({"torch": torch.__version__, "torch_file": torch.__file__,
                  "dists": sorted(d.metadata["Name"].lower() for d in m.distributions())}))
"""

SAMPLE_RUNS = """
import importlib.metadata as m, json
import flash_attn, flash_attn_2_cuda, torch
assert flash_attn.check_head_dim(64) == 64
print(json.dumps({"version": m.version("flash-attn"), "abi": flash_attn_2_cuda.cxx11_abi(),
                  "torch_abi": str(int(torch._C._GLIBCXX_USE_CXX11_ABI))}))
"""


def _state(python) -> dict:
    return json.loads(run([python, "-c", TORCH_STATE]).stdout.strip().splitlines()[-1])


def _sample(python) -> dict:
    return json.loads(run([python, "-c", SAMPLE_RUNS]).stdout.strip().splitlines()[-1])


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The caller's environment with a private pip cache (no wheel from another test or run)."""
    return {**os.environ, "PIP_CACHE_DIR": str(tmp_path / "pip-cache"), **extra}


def _three_ways_out(text: str) -> None:
    assert "--no-build-isolation" in text
    assert 'no-build-isolation-package = ["flash-attn"]' in text
    assert "match-runtime = true" in text
    assert "-C torch-python=" in text and "FA_SHIM_TORCH_PYTHON" in text


# ------------------------------------------------------------------ pip's isolated build


@pytest.mark.slow
def test_pip_isolated_build_uses_the_target_environments_torch(
    host_venv, sample_sdist_dir, tmp_path
):
    """pip's default: fa-shim's build requirements in a throwaway prefix, torch hidden by a
    PYTHONPATH overlay. The backend looks past it at the same interpreter's environment."""
    source = copy_repo(tmp_path / "fa-shim")
    before = _state(host_venv)
    proc = run(
        [host_venv, "-m", "pip", "install", "-v", source, *sample_settings(sample_sdist_dir)],
        env=_env(tmp_path),
    )
    out = proc.stdout + proc.stderr
    assert "found past the isolated build environment" in out
    assert f"building against torch {before['torch']}" in out
    assert f"at {Path(before['torch_file']).parent}" in out
    assert "Collecting torch" not in out and "Downloading torch" not in out

    after = _state(host_venv)
    assert (after["torch"], after["torch_file"]) == (before["torch"], before["torch_file"])
    ran = _sample(host_venv)
    assert ran["version"] == f"{SAMPLE_VERSION}+{HOST_LABEL}"
    assert ran["abi"] == ran["torch_abi"] == "1"


@pytest.mark.slow
def test_pip_building_before_it_installs_the_requested_torch_says_install_it_first(
    sample_sdist_dir, tmp_path
):
    """pip prepares flash-attn before it installs anything, so a torch named on the same command
    line is not there yet: fa-shim says so instead of building against something else."""
    source = copy_repo(tmp_path / "fa-shim")
    bare = make_venv(tmp_path / "bare", [])
    proc = run(
        [bare, "-m", "pip", "install", source, "torch", *sample_settings(sample_sdist_dir)],
        env=_env(tmp_path),
        check=False,
    )
    err = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"torch is not installed in the environment of {bare}" in err
    assert "install the torch you will run with first, in a separate step" in err
    assert not run([bare, "-m", "pip", "list"]).stdout.lower().count("torch")


# ------------------------------------------------- frontends with a build venv of their own


@pytest.mark.slow
@pytest.mark.parametrize("frontend", ["uv", "build"])
def test_separate_build_environment_fails_with_the_ways_out(
    frontend, host_venv, sample_sdist_dir, tmp_path
):
    """uv and `python -m build` build in a virtual environment of their own: the target's torch
    cannot be found from there, so the build stops at once and says what to do."""
    source = copy_repo(tmp_path / "fa-shim")
    if frontend == "uv":
        if not shutil.which("uv"):
            pytest.skip("uv is not installed")
        cmd = ["uv", "pip", "install", "--python", host_venv, source]
        cmd += sample_settings(sample_sdist_dir)
    else:
        config = [f"-C{opt}" for opt in sample_settings(sample_sdist_dir)[1::2]]
        cmd = [PY, "-m", "build", "--wheel", "--outdir", tmp_path / "dist", *config, source]
    proc = run(cmd, check=False, env=_env(tmp_path, UV_CACHE_DIR=str(tmp_path / "uv-cache")))
    # uv re-wraps the backend's stderr to its own width (narrower on a pytest-xdist worker)
    err = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert "fa-shim: error: torch is not importable by" in err
    frontend_name = "uv" if frontend == "uv" else "python -m build"
    assert f"This is a temporary build environment of {frontend_name}" in err
    _three_ways_out(err)
    assert "Traceback" not in err
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").glob("*.whl"))


# ------------------------------------------------------------------------ torch-python


def _other_python_version() -> str | None:
    """An interpreter of another Python version than this one, if the machine has one."""
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [shutil.which(f"python3.{minor}") for minor in range(8, 16)]
    candidates += [str(p) for p in Path("~/.pyenv/versions").expanduser().glob("3.*/bin/python3")]
    for candidate in filter(None, candidates):
        proc = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode == 0 and proc.stdout.strip() not in ("", here):
            return candidate
    return None


def test_torch_python_names_the_interpreter_whose_torch_is_used(host_venv):
    info = _torch.probe(host_venv)
    assert info.python == str(host_venv)
    assert info.found_by == f"setting torch-python ({host_venv})"
    import torch

    assert info.version == torch.__version__
    assert info.package_dir == os.path.dirname(torch.__file__)
    assert info.site_dir in info.extra_sys_path


def test_torch_python_of_another_python_version_is_refused():
    other = _other_python_version()
    if other is None:
        pytest.skip("no interpreter of another Python version on this machine")
    with pytest.raises(FaShimError) as caught:
        _torch.probe(Path(other))
    err = caught.value.render()
    assert f"torch-python {other} is Python 3." in err
    assert f"this build runs under Python {sys.version_info[0]}.{sys.version_info[1]}" in err
    assert "fix: point torch-python at a Python" in err


def test_torch_python_without_torch_is_refused(tmp_path):
    bare = make_venv(tmp_path / "bare", [])
    with pytest.raises(FaShimError) as caught:
        _torch.probe(bare)
    err = caught.value.render()
    assert (
        f"torch is not importable by {bare}, the interpreter named by setting torch-python" in err
    )
    assert "No module named 'torch'" in err


@pytest.mark.slow
def test_torch_python_lets_an_isolated_uv_build_use_the_runtime_torch(
    host_venv, sample_sdist_dir, tmp_path
):
    """uv builds in a venv of its own; naming the target's interpreter makes it build against
    that interpreter's torch (the host venv's 2.13 CPU) with nothing installed."""
    if not shutil.which("uv"):
        pytest.skip("uv is not installed")
    source = copy_repo(tmp_path / "fa-shim")
    before = _state(host_venv)
    proc = run(
        [
            "uv",
            "pip",
            "install",
            "-v",
            "--no-deps",  # uv does not count the system site-packages' torch as installed
            "--python",
            host_venv,
            source,
            *sample_settings(sample_sdist_dir),
            "-C",
            f"torch-python={host_venv}",
        ],
        env=_env(tmp_path, UV_CACHE_DIR=str(tmp_path / "uv-cache")),
    )
    out = proc.stdout + proc.stderr
    assert f"from setting torch-python ({host_venv})" in out
    assert _sample(host_venv)["version"] == f"{SAMPLE_VERSION}+{HOST_LABEL}"
    assert _state(host_venv)["torch_file"] == before["torch_file"]


def test_probe_is_a_child_process_and_the_backend_never_imports_torch():
    code = (
        "import sys, fa_backend.toolchain._torch as t; info = t.probe(); "
        "print(info.version, 'torch' in sys.modules)"
    )
    proc = run([PY, "-c", code], cwd=REPO)
    version, imported = proc.stdout.split()
    assert version.startswith("2.") and imported == "False"
