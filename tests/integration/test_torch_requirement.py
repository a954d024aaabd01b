"""The wheel declares the torch release it was built against (`Requires-Dist: torch==2.13.0+cpu`),
and real pip and uv act on it: a forced reinstall keeps the user's torch, uv refuses to resolve
the wheel with another torch, and fa-shim's wheel cache still serves it. The wheel is the sample
project built through fa-shim against the machine's torch 2.13.0+cpu (conftest's sample_wheel).
`pip check` against another torch, the CUDA torch 2.11 venv's:
tests/e2e/test_torch_requirement_other_torch.py."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, pip_wheel_cmd, run
from packaging.metadata import Metadata
from packaging.version import Version

from fa_backend import _hooks

pytestmark = pytest.mark.slow

REQUIREMENT = "torch==2.13.0+cpu"  # the machine's CPU torch: its label kept


@pytest.fixture
def built(sample_wheel) -> dict:
    return sample_wheel


def _metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return zf.read(name).decode()


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
    assert "depends on torch==2.13.0+cpu" in text, text
    assert "you require torch==2.11.0" in text or "torch==2.11.0 and flash-attn" in text, text


def test_the_wheel_cache_still_hits(built):
    out = built["tmp"] / "again"
    proc = run([*pip_wheel_cmd(sys.executable, out, *built["settings"]), "-v"], env=built["env"])
    assert "wheel cache hit" in proc.stdout + proc.stderr
    (wheel,) = out.glob("*.whl")
    assert _metadata(wheel) == _metadata(built["wheel"])
    assert f"Requires-Dist: {REQUIREMENT}\n" in _metadata(wheel)
