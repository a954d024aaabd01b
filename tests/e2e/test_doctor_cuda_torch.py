"""`python -m fa_backend doctor` with the CUDA 13.0 torch 2.11 venv (the session's): a stale nvcc
first on PATH, a bad setting, the jobs of a tailored set, the estimate of the real sdist. On this
machine's own torch and tools: tests/integration/test_doctor.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import PY, REPO, SHARED_SDISTS, TOOLS, run

from fa_backend.pipeline import _plan

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


@pytest.mark.slow
@pytest.mark.skipif(not CUDA13.is_dir(), reason="needs the CUDA 13.0 toolkit")
def test_stale_nvcc_first_on_path_with_torch_211(torch211_python, tmp_path):
    fake = fake_cuda_home(tmp_path)
    path = f"{fake / 'bin'}{os.pathsep}{os.environ['PATH']}"
    env = {"PATH": path, "CUDA_HOME": "", "CUDA_PATH": ""}
    proc = doctor("--python", torch211_python, **env)
    out, text = proc.stdout, " ".join(proc.stdout.split())
    assert proc.returncode == 0, out  # fa-shim copes: a warning, not an error
    assert "2.11.0+cu130  CUDA 13.0  _GLIBCXX_USE_CXX11_ABI=1" in out
    assert f"{fake / 'bin' / 'nvcc'}  CUDA 11.5  (from PATH)" in out
    chosen = next(line for line in out.splitlines() if "<- a build would use this" in line)
    assert "CUDA 13.0" in chosen
    assert f"warning: the first nvcc ({fake / 'bin' / 'nvcc'}, from PATH) is CUDA 11.5" in text
    assert "torch 2.11.0+cu130 is built with CUDA 13.0" in text
    assert "fix: put the matching toolkit first: `export CUDA_HOME=" in text

    data = json.loads(doctor("--python", torch211_python, "--json", **env).stdout)
    assert data["nvcc"]["found"][0] == {
        "path": str(fake / "bin" / "nvcc"),
        "version": "11.5",
        "origin": "PATH",
    }
    assert data["nvcc"]["chosen"] and data["nvcc"]["chosen"] != str(fake / "bin" / "nvcc")
    assert [p["severity"] for p in data["problems"]] == ["warning"]

    # Named by CUDA_HOME, the stale toolkit is binding: an error, and the fix.
    proc = doctor("--python", torch211_python, CUDA_HOME=str(fake))
    assert proc.returncode == 1
    text = " ".join(proc.stdout.split())
    assert "error: the nvcc named by CUDA_HOME" in text and "CUDA 11.5" in text
    assert "fix: install CUDA toolkit 13.x" in text


@pytest.mark.slow
@pytest.mark.skipif(not CUDA13.is_dir(), reason="needs the CUDA 13.0 toolkit")
def test_a_bad_setting_is_reported_and_the_rest_still_runs(torch211_python):
    proc = doctor("--python", torch211_python, "--json", FA_SHIM_MAX_JOBS="zero")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(proc.stdout)
    assert any("max-jobs" in p["cause"] for p in data["problems"]), data["problems"]
    assert data["torch"]["version"] == "2.11.0+cu130" and data["nvcc"]["chosen"]
    assert data["gpus"]["archs_source"] == "unknown: no flash-attn version configured"


@pytest.mark.slow
@pytest.mark.skipif(not CUDA13.is_dir(), reason="needs the CUDA 13.0 toolkit")
@pytest.mark.skipif(not SHARED_SDISTS.is_dir(), reason="needs the shared upstream sdists")
def test_jobs_are_the_builds_own_for_a_tailored_set(torch211_python, tmp_path, monkeypatch):
    """The inference set with -C max-jobs=8: doctor reports the jobs, threads and tu-parts the
    build's toolchain step chooses (8 jobs leave idle slots for 4 sources: 2 parts each)."""
    settings = {
        "FA_SHIM_TORCH_PYTHON": str(torch211_python),
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
    tools = _plan.toolchain(_plan.plan(None))  # what `pip install` would decide here
    assert (machine["jobs"], machine["nvcc_threads"], machine["tu_parts"]) == (
        tools.jobs,
        tools.nvcc_threads,
        tools.shape["tu_parts"],
    )
    assert machine["jobs"] == 8 and machine["tu_parts"] == 2
    assert "each kernel source in 2 parts" in doctor(**settings).stdout


@pytest.mark.slow
def test_doctor_shows_the_estimate_of_the_real_sdist(torch211_python, tmp_path):
    proc = doctor(
        "--python",
        torch211_python,
        FA_SHIM_SDIST_DIR=str(SHARED_SDISTS),
        FA_SHIM_CUDA_ARCHS="80",
        FA_SHIM_HEAD_DIMS="128",
        FA_SHIM_DTYPES="bf16",
        FA_SHIM_FORWARD_ONLY="true",
        XDG_CACHE_HOME=str(tmp_path / "xdg"),
    )
    assert "building against torch" not in proc.stderr
    out = proc.stdout
    assert "flash_attn-2.8.3.post2+cu130torch2.11cxx11abiTRUE.hdim128.bf16.fwd-cp3" in out
    assert "would compile 5 source(s) x 1 architecture (kernel set hdim128.bf16.fwd)" in out
    assert "architectures: 80 from setting cuda-archs -> sm_80" in out
    assert "estimate: " in out and "not in the wheel cache" in out


def _lines(python) -> dict[str, str]:
    proc = doctor("--python", python, "--json")
    return json.loads(proc.stdout)["lines"]


def test_doctor_says_torch_2_9_1_has_no_stable_line_below_its_floor(torch291_python):
    lines = _lines(torch291_python)
    assert lines["per-torch"].startswith("yes, a wheel for torch 2.9.1+cu128 alone"), lines
    assert "for torch >= 2.10.0; this torch is 2.9.1+cu128" in lines["stable"], lines
    assert lines["stable"].startswith("no: "), lines


def test_sa05_doctor_lists_the_stable_refusal_of_torch_2_9_1(torch291_python):
    """FA_SHIM_TORCH_ABI=stable: the build's refusal is a problem of its own, not only the
    build line's, whatever else doctor finds (here: no CUDA 12.8 nvcc)."""
    proc = doctor("--python", torch291_python, "--json", FA_SHIM_TORCH_ABI="stable")
    causes = [p["cause"] for p in json.loads(proc.stdout)["problems"]]
    refusal = (
        "a build would stop: -C torch-abi=stable builds flash-attn 2.8.3.post2 on torch's "
        "stable ABI, for torch >= 2.10.0; this torch is 2.9.1+cu128."
    )
    assert proc.returncode == 1 and refusal in causes, causes


def test_doctor_says_torch_2_15_takes_both_lines(torch215_python):
    lines = _lines(torch215_python)
    assert lines["stable"].startswith("yes, one wheel for every torch >= 2.10.0 of CUDA 13"), lines
    assert lines["per-torch"].startswith("yes, a wheel for torch 2.15.0+cu132 alone"), lines
