"""fleet/_handoff: the hit prepare_metadata found reaches build_wheel only for that metadata."""

from __future__ import annotations

import os

from fa_backend.fleet import _handoff

DIST_INFO = "flash_attn-0.1.0+cputorch2.13cxx11abiTRUE.dist-info"
WHEEL = "flash_attn-0.1.0+cputorch2.13cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"


def _prepared(tmp_path):
    cached, meta, out = tmp_path / "cache" / WHEEL, tmp_path / "meta", tmp_path / "out"
    for d in (cached.parent, meta / DIST_INFO, out):
        d.mkdir(parents=True)
    cached.write_bytes(b"the cached wheel")
    _handoff.give(cached, str(meta), DIST_INFO)
    return cached, meta, out


def test_the_wheel_prepare_found_is_delivered_without_touching_the_cache(tmp_path):
    cached, meta, out = _prepared(tmp_path)
    assert _handoff.take(str(meta / DIST_INFO), str(out)) == WHEEL
    assert (out / WHEEL).read_bytes() == b"the cached wheel"
    assert os.path.samefile(out / WHEEL, cached)  # linked, never copied, on one file system
    assert not list(meta.glob(".fa-shim-*.part"))


def test_nothing_is_handed_on_for_other_metadata_or_a_missing_wheel(tmp_path):
    _, meta, out = _prepared(tmp_path)
    assert _handoff.take(None, str(out)) is None  # build_wheel without prepare
    other = meta / "flash_attn-0.1.0+cu130torch2.11cxx11abiTRUE.dist-info"
    assert _handoff.take(str(other), str(out)) is None
    (meta / WHEEL).unlink()
    assert _handoff.take(str(meta / DIST_INFO), str(out)) is None
    (meta / _handoff.NOTE).write_text("{not json")
    assert _handoff.take(str(meta / DIST_INFO), str(out)) is None
    assert not list(out.iterdir())
