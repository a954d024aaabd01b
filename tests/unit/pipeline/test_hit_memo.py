"""The memo's key and what it re-reads (pipeline/_hit_memo): the names a frontend changes on
every run are left out of the key, every other name counts; the GPUs by the driver's listing."""

from __future__ import annotations

from fa_backend.flavours import _registry
from fa_backend.pipeline import _hit_memo


def test_the_key_counts_the_environment_but_for_what_changes_every_run(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    settings = _registry.load_settings({})
    monkeypatch.setenv("PIP_BUILD_TRACKER", "/tmp/pip-build-tracker-1")
    before = _hit_memo._path(settings)
    monkeypatch.setenv("PIP_BUILD_TRACKER", "/tmp/pip-build-tracker-2")
    assert _hit_memo._path(settings) == before
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/other-cuda/lib64")
    assert _hit_memo._path(settings) != before
    assert before.parent == tmp_path / "fa-shim" / "hits"


def test_the_gpus_are_told_by_the_drivers_listing(tmp_path, monkeypatch):
    """Architectures taken from the visible GPUs are recorded by /proc/driver/nvidia/gpus: a
    board swapped or added changes the memo's GPUs; no listing, no memo for such a plan."""
    monkeypatch.setattr(_hit_memo, "_GPUS", tmp_path / "gpus")
    assert _hit_memo._gpus() is None
    board = tmp_path / "gpus" / "0000:19:00.0"
    board.mkdir(parents=True)
    (board / "information").write_text("Model: \t\t NVIDIA H100 80GB HBM3\n")
    h100 = _hit_memo._gpus()
    (board / "information").write_text("Model: \t\t NVIDIA H200\n")
    h200 = _hit_memo._gpus()
    assert None not in (h100, h200) and h100 != h200


def test_what_the_plan_looks_for_is_looked_for_again(tmp_path, monkeypatch):
    """A toolkit installed where an nvcc is looked for, or a compiler replaced under the same
    name, changes what the memo watches: the plan is made again."""
    cxx = tmp_path / "bin" / "g++"
    cxx.parent.mkdir()
    cxx.write_text('#!/bin/sh\nexec g++ "$@"\n')
    cxx.chmod(0o755)
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    settings = _registry.load_settings({})
    before = _hit_memo._watched(settings)
    assert before == _hit_memo._watched(settings)
    assert before[str(tmp_path / "cuda" / "bin" / "nvcc")] is None  # looked for, not there
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    installed = _hit_memo._watched(settings)
    assert installed != before
    cxx.write_text('#!/bin/sh\n# another compiler\nexec g++ "$@"\n')
    assert _hit_memo._watched(settings) != installed


def test_a_memo_without_every_field_is_not_read(tmp_path, monkeypatch):
    """One another fa-shim wrote, or one edited by hand: the plan is made, nothing raises."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = _hit_memo._path(_registry.load_settings({}))
    path.parent.mkdir(parents=True)
    path.write_text('{"format": 1, "gpus": null}')
    assert _hit_memo._lookup({}) is None
    path.write_text("[1, 2]")
    assert _hit_memo._lookup({}) is None
