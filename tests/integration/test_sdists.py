"""Each project's sdist through the frontends that make one, real `python -m build` and `uv
build`: the root project's (FA2) and flash-attn-3/'s (FA3), each written by its flavour.

FA3's is built whole, sdist then a wheel from it, as the user's command does: the wheel stops at
FA3's own first error (this CPU torch has no CUDA), which shows that the backend unpacked from the
sdist runs the FA3 flavour. The root project's wheel from its sdist is compiled by
tests/integration/test_sample_install.py; here its sdist only."""

from __future__ import annotations

import shutil
import sys
import tarfile

import pytest
import tomllib
from conftest import REPO, clean_env, run

from fa_backend import __version__

FRONTENDS = {
    "build": [sys.executable, "-m", "build", "--no-isolation", "--outdir"],
    "uv": ["uv", "build", "--no-build-isolation", "--out-dir"],
}
FA3_NEEDS_CUDA = "FlashAttention-3 compiles CUDA kernels against a CUDA torch"


def _members(sdist) -> dict[str, bytes]:
    with tarfile.open(sdist) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


@pytest.mark.parametrize("frontend", list(FRONTENDS))
def test_the_fa3_project_builds_its_sdist_and_a_wheel_from_it(frontend, tmp_path):
    if frontend == "uv" and not shutil.which("uv"):
        pytest.skip("uv is not on PATH")
    out = tmp_path / "out"
    cmd = [*FRONTENDS[frontend], out, REPO / "flash-attn-3", "-C", "fa3-release=2.8.3"]
    proc = run(cmd, check=False, cwd=tmp_path, env=clean_env())
    text = proc.stdout + proc.stderr
    (sdist,) = out.glob("*.tar.gz")
    assert sdist.name == f"flash_attn_3-{__version__}.tar.gz", text  # fa-shim's: no line pinned
    top = f"flash_attn_3-{__version__}"
    members = _members(sdist)
    pyproject = tomllib.loads(members[f"{top}/pyproject.toml"].decode())
    assert pyproject["project"]["name"] == "flash-attn-3"
    assert pyproject["tool"]["fa-shim"] == {"flavour": "fa3", "fa3-release": "2.8.3"}
    assert f"{top}/fa_backend/resources/upstream_driver.py" in members  # the link's files
    assert f"{top}/vendored_patches/fa3/2.8.3/release.toml" in members
    assert f"{top}/LICENSE" in members
    assert not any("vendored_patches/2.8.3/" in n or "__pycache__" in n for n in members)
    assert f"Name: flash-attn-3\nVersion: {__version__}\n" in members[f"{top}/PKG-INFO"].decode()
    # then the wheel from that sdist: FA3's plan, in the unpacked copy, stops at its CUDA check
    assert proc.returncode != 0
    assert FA3_NEEDS_CUDA in text, text
    assert "no single" not in text


@pytest.mark.parametrize("frontend", list(FRONTENDS))
def test_the_root_project_builds_its_sdist(frontend, tmp_path):
    if frontend == "uv" and not shutil.which("uv"):
        pytest.skip("uv is not on PATH")
    out = tmp_path / "out"
    run([*FRONTENDS[frontend], out, "--sdist", REPO], cwd=tmp_path, env=clean_env())
    (sdist,) = out.glob("*.tar.gz")
    assert sdist.name == "flash_attn-2.8.3.post2.tar.gz"
    members = _members(sdist)
    pyproject = tomllib.loads(members["flash_attn-2.8.3.post2/pyproject.toml"].decode())
    assert pyproject["tool"]["fa-shim"]["flash-attn-version"] == "2.8.3.post2"
    assert "flash_attn-2.8.3.post2/vendored_patches/2.8.3.post2/release.toml" in members
    assert "flash_attn-2.8.3.post2/README.md" in members
    pkg_info = members["flash_attn-2.8.3.post2/PKG-INFO"].decode()
    assert "Name: flash-attn\nVersion: 2.8.3.post2\n" in pkg_info
    assert "Summary: FlashAttention-2 built from the upstream sdist" in pkg_info
