"""`python -m fa_backend doctor` on this machine's real tools, torch builds and a fake old nvcc."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import (
    PY,
    REPO,
    SAMPLE,
    SHARED_SDISTS,
    TOOLS,
    make_venv,
    pip_wheel_cmd,
    run,
    sample_settings,
)

from fa_backend.cli import _toolchain_sections
from fa_backend.pipeline import _build
from fa_backend.settings import _settings

OLD_ABI_CXX = str(TOOLS / "oldabi-g++")
CUDA13 = Path("/usr/local/cuda-13.0")


def doctor(*args, python=PY, **env) -> tuple:
    environ = {**os.environ, "PYTHONPATH": str(REPO), **env}
    proc = run([python, "-m", "fa_backend", "doctor", *args], check=False, env=environ)
    return proc


def fake_cuda_home(tmp_path: Path) -> Path:
    """A directory laid out like a CUDA 11.5 toolkit whose bin/nvcc is the fake banner."""
    home = tmp_path / "cuda-11.5"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    shutil.copy(TOOLS / "nvcc-11.5", nvcc)
    nvcc.chmod(0o755)
    return home


# ----------------------------------------------------------------------------- probes (fast)


def test_compiler_abi_probe_reads_libstdcxx():
    assert _toolchain_sections.compiler_abi("g++") == (1, "")
    assert _toolchain_sections.compiler_abi(OLD_ABI_CXX) == (0, "")  # RHEL devtoolset style default
    assert _toolchain_sections.compiler_abi("g++", "c++17") == (1, "")
    abi, error = _toolchain_sections.compiler_abi("g++", "c++nonsense")
    assert abi is None and "c++nonsense" in error
    abi, error = _toolchain_sections.compiler_abi("/nonexistent/g++")
    assert abi is None and "FileNotFoundError" in error


def test_doctor_here_with_an_old_abi_compiler(tmp_path):
    """System torch 2.13 is CPU-only (an error with its fix); CXX defaulting to ABI 0 is named."""
    proc = doctor(CXX=OLD_ABI_CXX)
    assert proc.returncode == 1
    out, text = proc.stdout, " ".join(proc.stdout.split())
    assert out.startswith("fa-shim doctor:")
    assert "wheel tag cp3" in out
    assert "2.13.0+cpu  CUDA none (CPU-only build)  _GLIBCXX_USE_CXX11_ABI=1" in out
    assert "default _GLIBCXX_USE_CXX11_ABI=0, accepts -std=c++20" in out
    assert "error: torch 2.13.0+cpu is a CPU-only build" in text
    assert "fix: install a CUDA build of torch" in text
    assert "defaults to _GLIBCXX_USE_CXX11_ABI=0, torch 2.13.0+cpu uses 1" in text
    assert "result: PROBLEMS (1 error, 1 warning)" in out
    assert "fa-shim doctor" not in proc.stderr  # the report is stdout, logs are stderr

    data = json.loads(doctor("--json", CXX=OLD_ABI_CXX).stdout)
    assert data["ok"] is False
    assert data["torch"]["cxx11_abi"] == 1 and data["torch"]["cuda"] is None
    assert data["compiler"]["default_cxx11_abi"] == 0
    assert data["ninja"]["version"]
    assert data["machine"]["cores"] >= 1 and data["machine"]["jobs"] >= 1
    assert sorted(p["severity"] for p in data["problems"]) == ["error", "warning"]


# ---------------------------------------------------------- a CUDA torch and a stale nvcc (slow)


@pytest.fixture(scope="module")
def cuda_torch_python(request) -> Path:
    """torch 2.11.0+cu130: TEST_TORCH211_PYTHON names a ready venv, else conftest makes one."""
    local = os.environ.get("TEST_TORCH211_PYTHON")
    return Path(local) if local else request.getfixturevalue("torch211_python")


@pytest.mark.slow
@pytest.mark.skipif(not CUDA13.is_dir(), reason="needs the CUDA 13.0 toolkit")
def test_stale_nvcc_first_on_path_with_torch_211(cuda_torch_python, tmp_path):
    fake = fake_cuda_home(tmp_path)
    path = f"{fake / 'bin'}{os.pathsep}{os.environ['PATH']}"
    env = {"PATH": path, "CUDA_HOME": "", "CUDA_PATH": ""}
    proc = doctor("--python", cuda_torch_python, **env)
    out, text = proc.stdout, " ".join(proc.stdout.split())
    assert proc.returncode == 0, out  # fa-shim copes: a warning, not an error
    assert "2.11.0+cu130  CUDA 13.0  _GLIBCXX_USE_CXX11_ABI=1" in out
    assert f"{fake / 'bin' / 'nvcc'}  CUDA 11.5  (from PATH)" in out
    chosen = next(line for line in out.splitlines() if "<- a build would use this" in line)
    assert "CUDA 13.0" in chosen
    assert f"warning: the first nvcc ({fake / 'bin' / 'nvcc'}, from PATH) is CUDA 11.5" in text
    assert "torch 2.11.0+cu130 is built with CUDA 13.0" in text
    assert "fix: put the matching toolkit first: `export CUDA_HOME=" in text

    data = json.loads(doctor("--python", cuda_torch_python, "--json", **env).stdout)
    assert data["nvcc"]["found"][0] == {
        "path": str(fake / "bin" / "nvcc"),
        "version": "11.5",
        "origin": "PATH",
    }
    assert data["nvcc"]["chosen"] and data["nvcc"]["chosen"] != str(fake / "bin" / "nvcc")
    assert [p["severity"] for p in data["problems"]] == ["warning"]

    # Named by CUDA_HOME, the stale toolkit is binding: an error, and the fix.
    proc = doctor("--python", cuda_torch_python, CUDA_HOME=str(fake))
    assert proc.returncode == 1
    text = " ".join(proc.stdout.split())
    assert "error: the nvcc named by CUDA_HOME" in text and "CUDA 11.5" in text
    assert "fix: install CUDA toolkit 13.x" in text


@pytest.mark.slow
@pytest.mark.skipif(not CUDA13.is_dir(), reason="needs the CUDA 13.0 toolkit")
def test_a_bad_setting_is_reported_and_the_rest_still_runs(cuda_torch_python):
    proc = doctor("--python", cuda_torch_python, "--json", FA_SHIM_MAX_JOBS="zero")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(proc.stdout)
    assert any("max-jobs" in p["cause"] for p in data["problems"]), data["problems"]
    assert data["torch"]["version"] == "2.11.0+cu130" and data["nvcc"]["chosen"]
    assert data["gpus"]["archs_source"] == "unknown: no flash-attn version configured"


@pytest.mark.slow
@pytest.mark.skipif(not CUDA13.is_dir(), reason="needs the CUDA 13.0 toolkit")
@pytest.mark.skipif(not SHARED_SDISTS.is_dir(), reason="needs the shared upstream sdists")
def test_jobs_are_the_builds_own_for_a_tailored_set(cuda_torch_python, tmp_path, monkeypatch):
    """The inference set with -C max-jobs=8: doctor reports the jobs, threads and tu-parts the
    build's toolchain step chooses (8 jobs leave idle slots for 4 sources: 2 parts each)."""
    settings = {
        "FA_SHIM_TORCH_PYTHON": str(cuda_torch_python),
        "FA_SHIM_SDIST_DIR": str(SHARED_SDISTS),
        "FA_SHIM_CACHE_DIR": str(tmp_path / "cache"),
        "FA_SHIM_HEAD_DIMS": "128",
        "FA_SHIM_DTYPES": "bf16",
        "FA_SHIM_FORWARD_ONLY": "true",
        "FA_SHIM_MAX_JOBS": "8",
    }
    proc = doctor("--json", **settings)
    machine = json.loads(proc.stdout)["machine"]

    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(REPO)
    tools = _build.toolchain(_build.plan(None))  # what `pip install` would decide here
    assert (machine["jobs"], machine["nvcc_threads"], machine["tu_parts"]) == (
        tools.jobs,
        tools.nvcc_threads,
        tools.tu_parts,
    )
    assert machine["jobs"] == 8 and machine["tu_parts"] == 2
    assert "each forward kernel source in 2 parts" in doctor(**settings).stdout


@pytest.mark.slow
def test_doctor_verifies_the_installed_flash_attn(host_venv, tmp_path):
    """An old-ABI flash-attn (built without fa-shim) installed next to torch 2.13 is caught."""
    source = shutil.copytree(SAMPLE, tmp_path / "sample-src")
    run(
        [host_venv, "-m", "pip", "install", "--no-build-isolation", "--no-deps", source],
        env={**os.environ, "CXX": OLD_ABI_CXX, "FLASH_ATTENTION_FORCE_BUILD": "TRUE"},
    )
    proc = doctor("--python", host_venv)
    assert proc.returncode == 1
    assert "flash_attn  0.1.0 at " in proc.stdout
    assert "FAILS verify (symbols, abi)" in proc.stdout  # one line: not wrapped
    text = " ".join(proc.stdout.split())
    assert "error: the installed flash-attn 0.1.0 does not fit torch 2.13.0+cpu" in text
    assert "built for the old C++ ABI" in text
    assert "--force-reinstall" in text and "python -m fa_backend verify flash_attn" in text


# ------------------------------------------------- the build it predicts (requirements, cache)


def test_doctor_reports_the_build_requirements_the_build_would_miss(tmp_path):
    """The newcomer's venv: pip's setuptools 65.5, no wheel/ninja/psutil/filelock. A
    --no-build-isolation build stops at once there; doctor says so, with the build's own fix."""
    python = make_venv(tmp_path / "newcomer", ["packaging", "pyelftools"])
    proc = doctor("--python", python, "--json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    unmet = data["requires"]["unmet"]
    assert any(u.startswith("setuptools>=70 (found ") for u in unmet), unmet
    assert {"ninja", "psutil", "filelock>=3.12", "wheel>=0.42"} <= set(unmet), unmet
    stops = [p for p in data["problems"] if "a build would stop at once" in p["cause"]]
    assert stops and "fa-shim's build requirements are missing" in stops[0]["cause"]
    assert stops[0]["fix"].startswith(f"{python} -m pip install ")
    text = doctor("--python", python).stdout
    assert "  requires    MISSING: setuptools>=70 (found " in text


@pytest.mark.slow
def test_doctor_predicts_the_wheel_cache_hit(host_venv, sample_sdist_dir, tmp_path):
    """Before the sample's build: not in the cache; after it: 'would be a wheel-cache hit' under
    the very fingerprint the build stored. No 'building against torch' from doctor."""
    settings = dict(item.split("=", 1) for item in sample_settings(sample_sdist_dir)[1::2])
    env = {_settings.env_name(k): v for k, v in settings.items()}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    before = doctor("--python", host_venv, "--json", **env)
    assert "building against torch" not in before.stderr, before.stderr
    build = json.loads(before.stdout)["build"]
    assert build["cache"] == "miss" and build["wheel"].startswith("flash_attn-0.1.0+cpu"), build
    run(
        [*pip_wheel_cmd(host_venv, tmp_path / "w"), "-C", "progress=none"],
        env={**os.environ, **env},
    )
    after = doctor("--python", host_venv, **env)
    assert "building against torch" not in after.stderr
    lines = [line for line in after.stdout.splitlines() if "would be a wheel-cache hit" in line]
    assert lines and str(tmp_path / "xdg" / "fa-shim" / "wheels") in lines[0], after.stdout
    assert build["wheel"] in lines[0]
    assert json.loads(doctor("--python", host_venv, "--json", **env).stdout)["build"]["cache"] == (
        "hit"
    )


@pytest.mark.slow
def test_doctor_shows_the_estimate_of_the_real_sdist(cuda_torch_python, tmp_path):
    proc = doctor(
        "--python",
        cuda_torch_python,
        FA_SHIM_SDIST_DIR=str(SHARED_SDISTS),
        FA_SHIM_CUDA_ARCHS="80",
        FA_SHIM_HEAD_DIMS="128",
        FA_SHIM_DTYPES="bf16",
        FA_SHIM_FORWARD_ONLY="true",
        XDG_CACHE_HOME=str(tmp_path / "xdg"),
    )
    assert "building against torch" not in proc.stderr
    out = proc.stdout
    assert "flash_attn-2.8.3+cu130torch2.11cxx11abiTRUE.hdim128.bf16.fwd-cp3" in out
    assert "would compile 5 source(s) x 1 architecture (kernel set hdim128.bf16.fwd)" in out
    assert "architectures: 80 from setting cuda-archs -> sm_80" in out
    assert "estimate: " in out and "not in the wheel cache" in out


def test_doctor_in_flash_attn_3_diagnoses_flash_attn_3():
    """Run where flash-attn-3/ reaches fa_backend (its link): that project, its flavour's tag,
    distribution and plan, not the root's."""
    fa3 = REPO / "flash-attn-3"
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    text = run([PY, "-m", "fa_backend", "doctor"], cwd=fa3, check=False, env=environ).stdout
    assert f"what `pip install --no-build-isolation {fa3}` would use here" in text
    proc = run([PY, "-m", "fa_backend", "doctor", "--json"], cwd=fa3, check=False, env=environ)
    report = json.loads(proc.stdout)
    assert report["project"] == {"path": str(fa3), "distribution": "flash-attn-3"}
    assert report["python"]["wheel_tag"].startswith("cp39-abi3-")
    assert "FlashAttention-3" in report["build"]["stops"]  # FA3's own plan ran (CPU torch)
    assert "flash-attn-3's CUDA kernels" in report["problems"][0]["cause"]
    # the root project, named explicitly from there: FA2 again
    root = run(
        [PY, "-m", "fa_backend", "doctor", "--json", "--project", REPO],
        cwd=fa3,
        check=False,
        env=environ,
    )
    assert json.loads(root.stdout)["project"]["distribution"] == "flash-attn"
