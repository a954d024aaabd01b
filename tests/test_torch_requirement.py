"""The wheel declares the torch release it was built against (`Requires-Dist: torch==2.13.0`),
and real pip and uv act on it: a forced reinstall keeps the user's torch, `pip check` reports a
different torch, uv refuses to resolve the wheel with another torch, and fa-shim's wheel cache
still serves it. The wheel is the sample project built through fa-shim against the machine's
torch 2.13.0+cpu; the "other torch" is the CUDA 13.0 torch 2.11.0 of the session's venv."""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, make_venv, pip_wheel_cmd, run, sample_settings
from packaging.metadata import Metadata
from packaging.version import Version

from fa_backend import _hooks

pytestmark = pytest.mark.slow

REQUIREMENT = "torch==2.13.0"  # the machine's torch 2.13.0+cpu, without its local label


def _metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return zf.read(name).decode()


@pytest.fixture(scope="module")
def built(sample_sdist_dir, tmp_path_factory) -> dict:
    """The sample wheel, built once with pip through fa-shim into a wheel cache of its own."""
    tmp = tmp_path_factory.mktemp("torch-requirement")
    cache = tmp / "fa-shim-cache"
    settings = [*sample_settings(sample_sdist_dir), "-C", f"cache-dir={cache}"]
    env = {**os.environ, "PIP_NO_CACHE_DIR": "1"}
    run([*pip_wheel_cmd(sys.executable, tmp / "w", *settings), "-v"], env=env)
    (wheel,) = (tmp / "w").glob("*.whl")
    return {"wheel": wheel, "settings": settings, "env": env, "tmp": tmp}


def test_metadata_requires_the_torch_release_it_was_built_against(built, tmp_path, monkeypatch):
    import torch

    assert Version(torch.__version__).public == "2.13.0", torch.__version__
    text = _metadata(built["wheel"])
    requires = [str(r) for r in Metadata.from_email(text, validate=False).requires_dist]
    assert requires == [REQUIREMENT]  # the sample's PKG-INFO has only `Requires-Dist: torch`
    # prepare_metadata_for_build_wheel says the same (pip resolves with it before building)
    monkeypatch.chdir(REPO)
    options = dict(o.split("=", 1) for o in built["settings"][1::2])
    name = _hooks.prepare_metadata_for_build_wheel(str(tmp_path), options)
    assert (tmp_path / name / "METADATA").read_text() == text


def test_force_reinstall_keeps_the_users_torch(built, host_venv):
    """`pip install --force-reinstall` re-resolves torch too. With `Requires-Dist: torch` pip
    took the newest torch the index had; now it takes the same release again."""
    report = built["tmp"] / "force.json"
    pip = [host_venv, "-m", "pip", "install", "--dry-run", "-q"]
    run([*pip, "--force-reinstall", "--report", report, built["wheel"]], env=built["env"])
    chosen = {i["metadata"]["name"]: i["metadata"]["version"] for i in _installs(report)}
    assert Version(chosen["torch"]).public == "2.13.0", chosen
    # the control: the same resolver asked for an unpinned torch picks another release
    unpinned = built["tmp"] / "unpinned.json"
    run([*pip, "--ignore-installed", "--report", unpinned, "torch"], env=built["env"])
    newest = next(i for i in _installs(unpinned) if i["metadata"]["name"] == "torch")
    assert Version(newest["metadata"]["version"]).public != "2.13.0", newest["metadata"]


def _installs(report: Path) -> list[dict]:
    return json.loads(report.read_text())["install"]


def test_pip_check_reports_a_different_torch(built, host_venv, torch211_python, tmp_path):
    def broken(python) -> list[str]:
        proc = run([python, "-m", "pip", "check"], check=False)
        return [line for line in proc.stdout.splitlines() if line.startswith("flash-attn")]

    # the torch it was built for (the system's 2.13.0+cpu, seen through the venv): not broken
    run([host_venv, "-m", "pip", "install", "-q", "--no-deps", built["wheel"]])
    assert broken(host_venv) == []

    # a venv whose torch is 2.11.0 (the session's torch venv, seen through a .pth file)
    other = make_venv(tmp_path / "t211", [])
    site = run(
        [torch211_python, "-c", "import os, torch; print(os.path.dirname(torch.__path__[0]))"]
    ).stdout.strip()
    purelib = run([other, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    Path(purelib.stdout.strip(), "torch211.pth").write_text(site + "\n")
    run([other, "-m", "pip", "install", "-q", "--no-deps", built["wheel"]])
    assert broken(other) == [
        "flash-attn 0.1.0+cputorch2.13cxx11abitrue has requirement torch==2.13.0, but you have "
        "torch 2.11.0."
    ]


def test_uv_refuses_the_wheel_with_another_torch(built):
    """uv against this interpreter, where torch 2.13.0+cpu is installed (dry runs, offline)."""
    uv = ["uv", "pip", "install", "--dry-run", "--python", sys.executable, "--no-index"]
    uv += ["--find-links", built["wheel"].parent, built["wheel"]]
    env = {**built["env"], "UV_CACHE_DIR": str(built["tmp"] / "uv-cache")}
    ok = run(uv, env=env)
    assert "Would install 1 package" in ok.stdout + ok.stderr
    refused = run([*uv, "torch==2.11.0"], env=env, check=False)
    assert refused.returncode != 0
    text = " ".join((refused.stdout + refused.stderr).split())
    assert "depends on torch==2.13.0" in text, text
    assert "you require torch==2.11.0" in text or "torch==2.11.0 and flash-attn" in text, text


def test_the_wheel_cache_still_hits(built):
    out = built["tmp"] / "again"
    proc = run([*pip_wheel_cmd(sys.executable, out, *built["settings"]), "-v"], env=built["env"])
    assert "wheel cache hit" in proc.stdout + proc.stderr
    (wheel,) = out.glob("*.whl")
    assert _metadata(wheel) == _metadata(built["wheel"])
    assert f"Requires-Dist: {REQUIREMENT}\n" in _metadata(wheel)
