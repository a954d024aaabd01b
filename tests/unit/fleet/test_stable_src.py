"""fleet/_stable_src: the slot a build compiles from is named by its sources, so two builds of the
same sources take the same path (the same device code, compiler-cache hits across nodes) whatever
else builds on the node; a numbered slot only while another build of those sources holds it."""

from __future__ import annotations

import fcntl
import os

from fa_backend.fleet import _stable_src


def test_the_sources_name_the_slot_and_a_held_one_falls_back_to_a_number(tmp_path, monkeypatch):
    monkeypatch.setattr(_stable_src, "ROOT", tmp_path)
    sources, other = {"sha256": "a" * 64}, {"sha256": "b" * 64}
    with _stable_src.place(tmp_path / "scratch", True, sources) as first:
        # a build of other sources meanwhile takes its own slot, not the next number
        with _stable_src.place(tmp_path / "scratch", True, other) as second:
            assert second != first and second.name.startswith(_stable_src.PREFIX)
        assert first.is_dir() and not second.exists()
        # the same sources while the first build holds their slot: the first numbered one
        with _stable_src.place(tmp_path / "scratch", True, sources) as third:
            assert third == tmp_path / f"{_stable_src.PREFIX}0"
    with _stable_src.place(tmp_path / "scratch", True, sources) as again:
        assert again == first  # a later build of the same sources: the same path
    fd = os.open(tmp_path / f"{first.name}.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released: the last build let it go
    os.close(fd)


def test_without_sharing_the_build_stays_in_its_scratch(tmp_path, monkeypatch):
    monkeypatch.setattr(_stable_src, "ROOT", tmp_path)
    with _stable_src.place(tmp_path / "scratch", False, {"sha256": "a"}) as where:
        assert where == tmp_path / "scratch"
