"""fleet/_compiling.wrappers: the compiler cache's settings around the build's compilers."""

from __future__ import annotations

import pytest
from conftest import fa2_plan

from fa_backend.flavours._interface import Tools
from fa_backend.fleet import _compiling, _objects
from fa_backend.pipeline import _upstream
from fa_backend.resources import launcher


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


def test_the_launcher_reads_the_spec_where_the_object_cache_writes_it(plan, tmp_path):
    """The build runs its launcher with the spec beside its own records (the source tree's
    parent); the object cache writes it there: the two paths are one (a build once served
    nothing because they were not)."""
    tools = Tools(None, None, jobs=1, nvcc_threads=None, compiler_cache=None)
    wrappers = _compiling.wrappers(plan, tools, tmp_path / "place")
    scratch = tmp_path / "place" / "src"  # a flavour lays its tree out below the place
    scratch.mkdir(parents=True)
    env = _upstream.environment(plan, tools, scratch, None, wrappers)
    spec = _objects.write_spec(scratch, tmp_path / "objects", {}, [], "torch 9.9", 60, 1)
    assert env[launcher.SPEC_ENV] == str(spec) and env[launcher.SERVE_ENV] == _compiling.SERVE
