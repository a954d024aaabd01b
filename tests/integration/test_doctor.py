"""`python -m fa_backend doctor` on this machine's real tools and CPU torch, an old-ABI compiler and
an installed flash-attn. With the CUDA torch 2.11 venv and a fake old nvcc:
tests/e2e/test_doctor_cuda_torch.py."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import (
    PY,
    REPO,
    SAMPLE,
    TOOLS,
    make_venv,
    pip_wheel_cmd,
    run,
    sample_settings,
)

from fa_backend.cli import _toolchain_sections
from fa_backend.settings import _settings

OLD_ABI_CXX = str(TOOLS / "oldabi-g++")


def doctor(*args, python=PY, **env) -> tuple:
    environ = {**os.environ, "PYTHONPATH": str(REPO), **env}
    proc = run([python, "-m", "fa_backend", "doctor", *args], check=False, env=environ)
    return proc


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


# ------------------------------------------------------------------ an installed flash-attn (slow)


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
    """The newcomer's venv: pip's setuptools 65.5, no wheel/ninja. A
    --no-build-isolation build stops at once there; doctor says so, with the build's own fix."""
    python = make_venv(tmp_path / "newcomer", ["packaging", "pyelftools"])
    proc = doctor("--python", python, "--json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    unmet = data["requires"]["unmet"]
    assert any(u.startswith("setuptools>=70 (found ") for u in unmet), unmet
    assert {"ninja", "wheel>=0.42"} <= set(unmet), unmet
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
    assert report["pins"] == {"fa3-release": "auto"}  # what its pyproject.toml picks
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
    # a setting it cannot load: still that project's flavour, read from its pyproject.toml
    broken = run(
        [PY, "-m", "fa_backend", "doctor", "--json"],
        cwd=fa3,
        check=False,
        env={**environ, "FA_SHIM_MAX_JOBS": "many"},
    )
    report = json.loads(broken.stdout)
    assert report["project"]["distribution"] == "flash-attn-3"
    assert "FA_SHIM_MAX_JOBS" in report["problems"][0]["cause"]


def test_doctor_names_a_cache_a_build_cannot_write_with_a_fix_that_clears_it(tmp_path):
    """A wheel-cache-dir under a file (its objects/ beside the wheels): a build degrades to
    compiling and keeping nothing there, so doctor reports each cache as an error with its fix;
    with the settings those fixes name, neither is reported."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cache = blocker / "c"
    text = " ".join(doctor(FA_SHIM_WHEEL_CACHE_DIR=str(cache)).stdout.split())
    for what, path, off in (
        ("wheel cache", cache, "wheel-cache=false"),
        ("object cache", cache / "objects", "object-cache=false"),
    ):
        assert (
            f"error: the {what} {path} cannot be written (a file is in the way: {blocker} is "
            "not a directory): a build keeps nothing there" in text
        ), text
        assert f"fix: make {path} a directory this user can write, name another with -C " in text
        assert f"or build with -C {off}." in text
    env = {"FA_SHIM_WHEEL_CACHE": "false", "FA_SHIM_OBJECT_CACHE": "false"}
    fixed = doctor(FA_SHIM_WHEEL_CACHE_DIR=str(cache), **env).stdout
    assert "cannot be written" not in fixed and "object cache off" in fixed, fixed


def test_sa05_doctor_lists_the_stable_refusal_beside_a_missing_toolkit(tmp_path):
    """FA_SHIM_TORCH_ABI=stable on torch 2.9.1+cu128 (its probed facts as values: the suite
    builds that venv for e2e only, where test_doctor_cuda_torch.py runs the whole doctor): this
    machine's real nvccs (CUDA 13) give the toolkit error, the build's real plan its refusal of
    the stable line. Both are errors: installing a CUDA 12.8 toolkit alone left the build
    refused."""
    from conftest import torch_info

    from fa_backend.cli import _doctor
    from fa_backend.flavours import _registry

    torch = torch_info("2.9.1+cu128", "12.8")
    flavour, settings = _registry.load({"torch-abi": "stable"}, environ={}, project_dir=REPO)
    report = _toolchain_sections.DoctorReport(REPO)
    _toolchain_sections.nvcc_section(report, settings, torch)
    with pytest.raises(_doctor.FaShimError) as refused:
        flavour.plan(settings, torch)
    _doctor.build_section(report, REPO, None, None, refused.value)
    causes = [c.summary for c in report.checks]
    assert len(causes) == 2 and "no nvcc on this machine has its major" in causes[0], causes
    assert causes[1] == (
        "a build would stop: -C torch-abi=stable builds flash-attn 2.8.3.post2 on torch's "
        "stable ABI, for torch >= 2.10.0; this torch is 2.9.1+cu128."
    )
    assert report.checks[1].fix.startswith("install torch >= 2.10.0, or build the per-torch")
    assert report.summary() == "PROBLEMS (2 errors, 0 warnings)"
    _doctor.build_section(report, REPO, None, None, refused.value)  # the same stop: once
    assert len(report.checks) == 2
