"""End to end on the sample sdist through real frontends: pip --no-build-isolation and
python -m build --no-isolation (sdist of fa-shim first, then the wheel from that sdist)."""

from __future__ import annotations

import json
import zipfile

import pytest
from conftest import PY, REPO, SAMPLE_VERSION, pip_wheel_cmd, run, sample_settings

pytestmark = pytest.mark.slow

IMPORT_AND_RUN = """
import flash_attn, flash_attn_2_cuda, torch
assert flash_attn.__version__ == "{version}", flash_attn.__version__
assert flash_attn_2_cuda.cxx11_abi() == str(int(torch._C._GLIBCXX_USE_CXX11_ABI))
assert flash_attn.check_head_dim(64) == 64
try:
    flash_attn.check_head_dim(3)
except RuntimeError as exc:  # c10::Error built from a std::string crossed into Python
    assert "head_dim must be a positive multiple of 8, got 3" in str(exc)
else:
    raise AssertionError("no error")
print("sample ok")
"""


def test_pip_install_no_build_isolation(host_venv, sample_sdist_dir, tmp_path):
    marker = tmp_path / "download-entered"
    proc = run(
        [
            host_venv,
            "-m",
            "pip",
            "install",
            "--no-build-isolation",
            "-v",
            REPO,
            *sample_settings(sample_sdist_dir),
        ],
        env={**_env(), "SAMPLE_DOWNLOAD_MARKER": str(marker)},
    )
    assert "building against torch 2.13.0" in proc.stdout + proc.stderr
    assert not marker.exists(), "upstream's download path was entered"
    out = run([host_venv, "-c", IMPORT_AND_RUN.format(version=SAMPLE_VERSION)])
    assert "sample ok" in out.stdout
    listing = run([host_venv, "-m", "pip", "show", "-f", "flash-attn"]).stdout
    assert f"Version: {SAMPLE_VERSION}+cputorch2.13cxx11abitrue" in listing
    assert "fa_shim_provenance.json" in listing


def test_python_m_build_sdist_then_wheel(sample_sdist_dir, tmp_path):
    out = tmp_path / "dist"
    config = [f"-C{opt}" for opt in sample_settings(sample_sdist_dir)[1::2]]
    run([PY, "-m", "build", "--no-isolation", "--outdir", out, *config, REPO], env=_env())
    sdists = list(out.glob("*.tar.gz"))
    wheels = list(out.glob("*.whl"))
    assert [s.name for s in sdists] == [f"flash_attn-{SAMPLE_VERSION}.tar.gz"]
    assert len(wheels) == 1 and "+cputorch2.13cxx11abiTRUE-cp3" in wheels[0].name
    with zipfile.ZipFile(wheels[0]) as zf:
        prov = next(n for n in zf.namelist() if n.endswith("fa_shim_provenance.json"))
        flags = json.loads(zf.read(prov))["injected_flags"][0]["injected"]
    assert flags["cxx"][-1] == "-D_GLIBCXX_USE_CXX11_ABI=1"
    assert flags["nvcc"][-1] == "-D_GLIBCXX_USE_CXX11_ABI=1"


def test_compile_commands_carry_the_injected_flags(sample_sdist_dir, tmp_path):
    """The build description torch writes (build.ninja) as ninja itself expands it."""
    proc = run(
        [
            PY,
            "-m",
            "fa_backend",
            "prepare",
            "--build-dir",
            tmp_path / "b",
            *sample_settings(sample_sdist_dir),
        ],
        cwd=REPO,
        env=_env(),
    )
    commands = json.loads(proc.stdout)["compile_commands"]
    assert [c["kind"] for c in commands] == ["cxx"]
    args = commands[0]["args"]
    abi = [a for a in args if a.startswith("-D_GLIBCXX_USE_CXX11_ABI=")]
    assert abi[-1] == "-D_GLIBCXX_USE_CXX11_ABI=1"
    assert [a for a in args if a.startswith("-std=")] == ["-std=c++20"]  # upstream's c++17 replaced


def test_a_download_attempt_by_upstream_code_fails_the_build(host_venv, sample_sdist_dir, tmp_path):
    """A future upstream download path that ignores FORCE_BUILD cannot sneak a binary in."""
    out = tmp_path / "wheels"
    proc = run(
        pip_wheel_cmd(host_venv, out, *sample_settings(sample_sdist_dir)),
        env={**_env(), "SAMPLE_ALWAYS_DOWNLOAD": "1"},
        check=False,
    )
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "upstream's build tried to reach the network" in text
    assert "github.com" in text
    assert not out.exists() or not list(out.iterdir())


def _env():
    import os

    return dict(os.environ)
