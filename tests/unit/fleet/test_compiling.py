"""fleet/_compiling.wrappers: the compiler cache's settings around the build's compilers."""

from __future__ import annotations

import pytest
from conftest import fa2_plan

from fa_backend.flavours._interface import Tools
from fa_backend.fleet import _compiling


@pytest.fixture
def plan(sample_sdist_dir, monkeypatch):
    for name in ("CCACHE_BASEDIR", "SCCACHE_BASEDIRS", "SCCACHE_SERVER_UDS"):
        monkeypatch.delenv(name, raising=False)
    return fa2_plan(sample_sdist_dir)


def test_a_compiler_cache_hashes_paths_relative_to_the_build(plan, tmp_path):
    tools = Tools(None, None, jobs=2, nvcc_threads=4, compiler_cache="/opt/cache bin/sccache")
    env = _compiling.wrappers(plan, tools, tmp_path).env
    # every build has a fresh scratch: paths hashed relative to it, or nothing ever hits
    assert env["CCACHE_BASEDIR"] == str(tmp_path) and env["CCACHE_NOHASHDIR"] == "true"
    assert env["SCCACHE_SERVER_UDS"].startswith("/tmp/fa-shim-sccache-")


def test_without_a_compiler_cache_the_wrappers_set_nothing(plan, tmp_path):
    tools = Tools(None, None, jobs=2, nvcc_threads=None, compiler_cache=None)
    assert _compiling.wrappers(plan, tools, tmp_path).env == {}


def test_the_users_sccache_settings_win(plan, tmp_path, monkeypatch):
    monkeypatch.setenv("SCCACHE_SERVER_UDS", "/tmp/mine.sock")
    tools = Tools(None, None, jobs=1, nvcc_threads=None, compiler_cache="sccache")
    assert "SCCACHE_SERVER_UDS" not in _compiling.wrappers(plan, tools, tmp_path).env
