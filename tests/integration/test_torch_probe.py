"""The torch probe's cache: a torch probed before is not imported again (a wheel-cache hit must
take seconds), a reinstalled torch is, and the interpreter's own facts are always fresh.

Real interpreter, real torch (the machine's torch 2.13 CPU build).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fa_backend.toolchain import _torch

VERSION_PY = Path(torch.__file__).with_name("version.py")


@pytest.fixture
def cached(tmp_path) -> Path:
    """A probe cache holding one real answer whose version is then marked, so that an answer
    read from the cache can be told from a fresh one."""
    cache = tmp_path / "probes"
    first = _torch._cached_probe(sys.executable, [], cache)
    assert first["version"] == torch.__version__
    (entry,) = cache.glob("*.json")
    entry.write_text(json.dumps({**first, "version": "0.0.0+from.cache"}))
    return cache


def test_a_torch_probed_before_is_read_from_the_cache(cached):
    again = _torch._cached_probe(sys.executable, [], cached)
    assert again["version"] == "0.0.0+from.cache"
    assert again["package_dir"] == os.path.dirname(torch.__file__)


def test_a_reinstalled_torch_is_probed_again(cached):
    stat = VERSION_PY.stat()
    try:  # what a reinstall does to torch/version.py: a new file, a new mtime
        os.utime(VERSION_PY, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        fresh = _torch._cached_probe(sys.executable, [], cached)
    finally:
        os.utime(VERSION_PY, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert fresh["version"] == torch.__version__
    assert len(list(cached.glob("*.json"))) == 2


def test_another_cuda_home_is_probed_again(cached, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", "/opt/elsewhere/cuda")  # cpp_extension.CUDA_HOME follows it
    fresh = _torch._cached_probe(sys.executable, [], cached)
    assert fresh["version"] == torch.__version__
    assert len(list(cached.glob("*.json"))) == 2


def test_a_fresh_directory_on_path_still_hits(cached, monkeypatch, tmp_path):
    """pip's isolated builds put a new bin directory first on PATH on every run."""
    overlay = tmp_path / "pip-build-env-x1y2" / "overlay" / "bin"
    overlay.mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{overlay}{os.pathsep}{os.environ['PATH']}")
    again = _torch._cached_probe(sys.executable, [], cached)
    assert again["version"] == "0.0.0+from.cache"


def test_another_nvcc_on_path_is_probed_again(cached, monkeypatch, tmp_path):
    bin_dir = tmp_path / "cuda-x" / "bin"  # cpp_extension.CUDA_HOME follows `which nvcc`
    bin_dir.mkdir(parents=True)
    (bin_dir / "nvcc").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "nvcc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    fresh = _torch._cached_probe(sys.executable, [], cached)
    assert fresh["version"] == torch.__version__
    assert len(list(cached.glob("*.json"))) == 2


def test_the_import_path_is_fresh_on_a_hit(cached, monkeypatch, tmp_path):
    extra = tmp_path / "extra-site"
    extra.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(extra))
    again = _torch._cached_probe(sys.executable, [], cached)
    assert again["version"] == "0.0.0+from.cache"
    assert str(extra) in again["search_path"]


def test_an_unwritable_cache_only_costs_the_next_probe(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    answer = _torch._cached_probe(sys.executable, [], blocker / "probes")
    assert answer["version"] == torch.__version__


def test_the_early_locate_child_answers_only_the_environment_it_started_in(monkeypatch):
    """Started before a hook's imports, used by the plan's probe in that same environment; one
    started in another (an earlier hook's, in this process) is never its answer, and is stopped."""
    monkeypatch.setattr(_torch, "_early", {})
    _torch.locate_early()
    _torch.locate_early()  # one child, not two
    (first,) = _torch._early.values()
    monkeypatch.setenv("FA_SHIM_TEST_OTHER_ENVIRONMENT", "1")
    answer = _torch._run_probe(sys.executable, [], "locate")
    assert answer["python"] == sys.executable and "torch_init" in answer
    assert list(_torch._early.values()) == [first]  # not taken: started in another environment
    _torch.locate_early()
    assert first.poll() is not None and first not in _torch._early.values()
    (second,) = _torch._early.values()
    assert isinstance(second, subprocess.Popen)
    assert "torch_init" in _torch._run_probe(sys.executable, [], "locate") and not _torch._early
