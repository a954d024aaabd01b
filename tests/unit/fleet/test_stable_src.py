"""fleet/_compiling.place: the slot a build compiles from is named by its sources, so every
build of the same sources compiles from the same path (the same device code, compiler-cache hits
across nodes) whatever else builds on the node: a second build of those sources waits for the
first."""

from __future__ import annotations

import fcntl
import os
import threading

from fa_backend.fleet import _compiling


def test_the_sources_name_the_slot_and_a_second_build_of_them_waits(tmp_path, monkeypatch):
    monkeypatch.setattr(_compiling, "ROOT", tmp_path)
    monkeypatch.setattr(_compiling, "POLL", 0.01)
    sources, other = {"sha256": "a" * 64}, {"sha256": "b" * 64}
    taken = []
    second = threading.Thread(target=lambda: taken.append(_take(tmp_path, sources)))
    with _compiling.place(tmp_path / "scratch", True, sources) as first:
        # a build of other sources meanwhile takes its own slot
        with _compiling.place(tmp_path / "scratch", True, other) as elsewhere:
            assert elsewhere != first and elsewhere.name.startswith(_compiling.PREFIX)
        assert first.is_dir() and not elsewhere.exists()
        # the same sources while the first build holds their slot: it waits, then takes it
        second.start()
        second.join(0.3)
        assert second.is_alive() and not taken
    second.join(10)
    assert taken == [first] and not first.exists()
    fd = os.open(tmp_path / f"{first.name}.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released: the last build let it go
    os.close(fd)


def _take(root, sources):
    with _compiling.place(root / "scratch", True, sources) as where:
        return where


def test_a_slot_that_cannot_be_made_leaves_the_build_in_its_scratch(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_compiling, "ROOT", tmp_path)
    sources = {"sha256": "a" * 64}
    with _compiling.place(tmp_path / "scratch", True, sources) as slot:
        pass
    slot.write_text("not a directory")  # what rmtree cannot clear, as another user's tree
    with _compiling.place(tmp_path / "scratch", True, sources) as where:
        assert where == tmp_path / "scratch"
    err = " ".join(capsys.readouterr().err.split())
    assert f"{slot} cannot be made" in err and "no kernel object is kept" in err, err


def test_without_sharing_the_build_stays_in_its_scratch(tmp_path, monkeypatch):
    monkeypatch.setattr(_compiling, "ROOT", tmp_path)
    with _compiling.place(tmp_path / "scratch", False, {"sha256": "a"}) as where:
        assert where == tmp_path / "scratch"
