"""The compiler cache checked against the nvcc a real build chose: the index's sccache 0.16.0
with nvcc 13.3 (from the index) is one error before anything compiles, and its fix as written
(-C compiler-cache=none) builds; with this machine's nvcc 13.0 it builds through sccache as
before. The sample's real CUDA file (tests/packages/sample-cuda) under torch 2.11.0+cu130. The
pair itself: tests/integration/test_sccache_nvcc.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import SAMPLE_VERSION, build_wheel_error, pack_sample, pip_wheel_cmd, run

pytestmark = pytest.mark.slow


def _config(tmp_path: Path, **values) -> dict[str, str]:
    sdists = tmp_path / "sdists"
    pack_sample(sdists, cuda=True)
    return {
        "flash-attn-version": SAMPLE_VERSION,
        "sdist-dir": str(sdists),
        "allow-unknown-version": "true",
        "cuda-archs": "80",
        "wheel-cache": "false",
        **{k: str(v) for k, v in values.items()},
    }


def _build(python: Path, tmp_path: Path, config: dict[str, str]):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FA_SHIM_", "SCCACHE_"))}
    env["SCCACHE_DIR"] = str(tmp_path / "sccache")
    options = [a for k, v in config.items() for a in ("-C", f"{k}={v}")]
    proc = run(pip_wheel_cmd(python, tmp_path / "wheels", "-v", *options), env=env)
    assert list((tmp_path / "wheels").glob("flash_attn-*.whl")), proc.stderr[-3000:]
    return proc


def test_sccache_016_with_nvcc_133_is_one_error_before_compiling(
    torch211_python, sccache_016, nvcc_133, tmp_path
):
    config = _config(tmp_path, nvcc=nvcc_133.path, **{"compiler-cache": sccache_016})
    err = build_wheel_error(torch211_python, tmp_path, config)
    assert err.count("fa-shim: error:") == 1, err
    assert f"is sccache 0.16.0, and nvcc {nvcc_133.path} is CUDA 13.3" in err
    assert "install sccache 0.18.0 or later" in err and "-C compiler-cache=none" in err
    assert "sccache server" not in err and "preparing the sources" not in err  # before all
    proc = _build(torch211_python, tmp_path, {**config, "compiler-cache": "none"})
    assert f"using nvcc {nvcc_133.path}" in proc.stderr and "sccache:" not in proc.stderr


def test_sccache_016_with_nvcc_130_builds_through_it_as_before(
    torch211_python, sccache_016, tmp_path
):
    nvcc = "/usr/local/cuda-13.0/bin/nvcc"
    if not os.access(nvcc, os.X_OK):
        pytest.skip(f"no {nvcc} on this machine")
    proc = _build(
        torch211_python, tmp_path, _config(tmp_path, nvcc=nvcc, **{"compiler-cache": sccache_016})
    )
    assert "sccache: 0/" in proc.stderr and " hits" in proc.stderr, proc.stderr[-3000:]
