"""core/_ownership: a directory is fa-shim's when it made it (marker), was empty, or is new;
a failed run takes back its own additions only."""

from __future__ import annotations

import pytest

from fa_backend.core import _ownership
from fa_backend.core._errors import FaShimError


def test_a_directory_with_a_users_file_is_refused_and_kept(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "mine.txt").write_text("keep")
    with pytest.raises(FaShimError) as info:
        _ownership.claim(tmp_path, "--build-dir")
    assert "holds files fa-shim did not make (src)" in info.value.cause
    assert "--build-dir" in info.value.fix
    assert (tmp_path / "src" / "mine.txt").read_text() == "keep"
    assert not (tmp_path / _ownership.MARKER).exists()


def test_a_new_directory_is_made_marked_and_removed_on_failure(tmp_path):
    target = tmp_path / "new" / "dir"
    with pytest.raises(KeyboardInterrupt), _ownership.owned(target, "--build-dir"):
        assert target.is_dir() and not _ownership.is_ours(target)  # marked when it succeeds
        (target / "src").mkdir()
        raise KeyboardInterrupt
    assert not target.exists() and (tmp_path / "new").is_dir()


def test_an_empty_directory_is_left_empty_after_a_failure(tmp_path):
    with pytest.raises(RuntimeError), _ownership.owned(tmp_path, "--build-dir"):
        (tmp_path / "src").mkdir()
        (tmp_path / "log.txt").write_text("x")
        raise RuntimeError
    assert list(tmp_path.iterdir()) == []


def test_fa_shims_own_directory_is_taken_again_and_a_failure_leaves_no_half_tree(tmp_path):
    with _ownership.owned(tmp_path, "--build-dir"):
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "setup.py").write_text("upstream\n")
    assert _ownership.is_ours(tmp_path) and (tmp_path / _ownership.RECORD).is_file()
    with pytest.raises(RuntimeError), _ownership.owned(tmp_path, "--build-dir"):
        assert not (tmp_path / "src").exists()  # fa-shim's own tree goes first
        assert not (tmp_path / _ownership.RECORD).exists()  # and with it "prepared"
        (tmp_path / "dist").mkdir()
        raise RuntimeError
    assert sorted(p.name for p in tmp_path.iterdir()) == [_ownership.MARKER]


@pytest.mark.parametrize("change", ["added", "edited", "emptied dir"])
def test_a_file_a_user_added_or_edited_in_fa_shims_directory_is_named_and_kept(tmp_path, change):
    with _ownership.owned(tmp_path, "--build-dir"):
        (tmp_path / "src" / "csrc").mkdir(parents=True)
        (tmp_path / "src" / "setup.py").write_text("upstream\n")
    name = {"added": "src/my-edit.txt", "edited": "src/setup.py", "emptied dir": "src/new"}[change]
    if change == "emptied dir":
        (tmp_path / name).mkdir()
    else:
        (tmp_path / name).write_text("mine, longer than upstream's\n")
    with pytest.raises(FaShimError) as info, _ownership.owned(tmp_path, "--build-dir"):
        pytest.fail("claimed")
    assert f"did not write or that changed since its last prepare there ({name})" in str(info.value)
    assert "move those files out of" in info.value.fix
    assert (tmp_path / name).exists() and (tmp_path / _ownership.RECORD).is_file()


def test_fa_shims_directory_without_its_record_is_refused_untouched(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / _ownership.MARKER).write_text(_ownership._TEXT)  # an older fa-shim's, or killed
    with pytest.raises(FaShimError, match="holds no record of the files it wrote"):
        _ownership.claim(tmp_path, "--build-dir")
    assert (tmp_path / "src").is_dir()


def test_a_forged_or_linked_marker_does_not_make_a_directory_ours(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / _ownership.MARKER).write_text("something else\n")
    assert not _ownership.is_ours(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "real").write_text(_ownership._TEXT)
    (tmp_path / "b" / _ownership.MARKER).symlink_to(tmp_path / "real")
    assert not _ownership.is_ours(tmp_path / "b")


def test_a_file_where_the_directory_should_be_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with (
        pytest.raises(FaShimError, match="is not a directory"),
        _ownership.owned(tmp_path / "f", "--build-dir"),
    ):
        pytest.fail("claimed")
    assert (tmp_path / "f").read_text() == "x"


def test_b05_a_symlink_to_a_directory_is_refused_naming_its_target(tmp_path):
    """--build-dir a symlink to an empty directory read "is not a directory"; the fix names
    the target, which is taken as written."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    with (
        pytest.raises(FaShimError) as exc,
        _ownership.owned(tmp_path / "link", "--build-dir"),
    ):
        pytest.fail("claimed")
    target = tmp_path / "empty"
    assert exc.value.cause == (
        f"{tmp_path / 'link'} (--build-dir) is a symlink to {target}, not a directory itself."
    )
    assert exc.value.fix == f"name the directory: --build-dir {target}"
    assert list(target.iterdir()) == [] and (tmp_path / "link").is_symlink()
    with _ownership.owned(target, "--build-dir") as out:  # the fix, as written
        (out / "src").mkdir()
    assert _ownership.is_ours(target)


def test_a_directory_fa_shim_fills_run_after_run_refuses_what_it_did_not_make(tmp_path):
    """refuse_foreign (a wheel cache's root: fleet/_wheel_cache.check_root): missing or holding
    only what `ours` accepts, taken; else one error naming the files, none of them changed."""
    ours = lambda p: p.name.startswith("ours")  # noqa: E731
    _ownership.refuse_foreign(tmp_path / "missing", "setting x", ours)
    (tmp_path / "ours-1").mkdir()
    _ownership.refuse_foreign(tmp_path, "setting x", ours)
    (tmp_path / "notes.txt").write_text("mine\n")
    with pytest.raises(FaShimError) as info:
        _ownership.refuse_foreign(tmp_path, "setting x", ours)
    assert info.value.cause.startswith(f"{tmp_path} (setting x) holds files fa-shim did not make")
    assert "(notes.txt);" in info.value.cause
    assert (
        info.value.fix
        == f"name a new or empty directory for setting x; nothing in {tmp_path} was changed."
    )
    assert (tmp_path / "notes.txt").read_text() == "mine\n"
