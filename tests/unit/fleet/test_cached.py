"""fleet/_cached: the compiler cache's settings around the build's compilers (wrappers), and
verify_once: a hit's RECORD and verify run once per exact bytes and torch."""

from __future__ import annotations

import pytest
from conftest import fa2_plan

from fa_backend.core._errors import FaShimError
from fa_backend.flavours._interface import Tools
from fa_backend.fleet import _cached
from fa_backend.toolchain._torch import TorchInfo


def _torch(tmp_path) -> TorchInfo:
    lib = tmp_path / "site" / "torch" / "lib"
    lib.mkdir(parents=True)
    (lib / "libtorch_cpu.so").write_bytes(b"v1")
    return TorchInfo("2.13.0", None, 1, None, str(lib.parent), "c++20", "python", False)


def test_the_same_bytes_and_torch_are_checked_once(tmp_path):
    torch, wheel, calls = _torch(tmp_path), tmp_path / "a.whl", []
    wheel.write_bytes(b"wheel")
    for _ in range(2):
        _cached.verify_once(tmp_path / "cache", wheel, torch, lambda: calls.append(1))
    assert len(calls) == 1
    wheel.write_bytes(b"wheel!")  # other bytes
    _cached.verify_once(tmp_path / "cache", wheel, torch, lambda: calls.append(1))
    (torch.lib_dir / "libtorch_cpu.so").write_bytes(b"v2, another size")  # another torch
    _cached.verify_once(tmp_path / "cache", wheel, torch, lambda: calls.append(1))
    assert len(calls) == 3


def test_a_failed_check_is_not_remembered(tmp_path):
    torch, wheel = _torch(tmp_path), tmp_path / "a.whl"
    wheel.write_bytes(b"wheel")

    def fail():
        raise FaShimError("RECORD does not match")

    for _ in range(2):
        with pytest.raises(FaShimError):
            _cached.verify_once(tmp_path / "cache", wheel, torch, fail)
    assert not (tmp_path / "cache" / "verified").exists()


@pytest.fixture
def plan(sample_sdist_dir, monkeypatch):
    for name in ("CCACHE_BASEDIR", "SCCACHE_BASEDIRS", "SCCACHE_SERVER_UDS"):
        monkeypatch.delenv(name, raising=False)
    return fa2_plan(sample_sdist_dir)


def test_a_compiler_cache_hashes_paths_relative_to_the_build(plan, tmp_path):
    tools = Tools(None, None, jobs=2, nvcc_threads=4, compiler_cache="/opt/cache bin/sccache")
    env = _cached.wrappers(plan, tools, tmp_path).env
    # every build has a fresh scratch: paths hashed relative to it, or nothing ever hits
    assert env["CCACHE_BASEDIR"] == str(tmp_path) and env["CCACHE_NOHASHDIR"] == "true"
    assert env["SCCACHE_SERVER_UDS"].startswith("/tmp/fa-shim-sccache-")


def test_without_a_compiler_cache_the_wrappers_set_nothing(plan, tmp_path):
    tools = Tools(None, None, jobs=2, nvcc_threads=None, compiler_cache=None)
    assert _cached.wrappers(plan, tools, tmp_path).env == {}


def test_the_users_sccache_settings_win(plan, tmp_path, monkeypatch):
    monkeypatch.setenv("SCCACHE_SERVER_UDS", "/tmp/mine.sock")
    tools = Tools(None, None, jobs=1, nvcc_threads=None, compiler_cache="sccache")
    assert "SCCACHE_SERVER_UDS" not in _cached.wrappers(plan, tools, tmp_path).env
