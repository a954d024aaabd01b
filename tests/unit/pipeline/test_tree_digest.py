"""fa-shim's own sources in the wheel-cache key (pipeline/_provenance.tree_digest): each file's
path and contents count, bytecode does not, and the order is pathlib's (by path parts), so the
key stayed what it was when the walk left pathlib."""

from __future__ import annotations

import hashlib

from fa_backend.pipeline import _provenance
from fa_backend.resources import PACKAGE


def _pathlib_digest(root):
    """The formula as it was written with pathlib."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _tree(root):
    # "a-b" sorts before "a/..." as a string, after it by parts
    for name, text in {"a-b.py": "1", "a/z.py": "2", "a/b/c.py": "3", "x.txt": "4"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_digest_is_pathlibs_and_ignores_bytecode(tmp_path):
    _tree(tmp_path)
    before = _provenance.tree_digest(str(tmp_path))
    assert before == _pathlib_digest(tmp_path)
    (tmp_path / "a" / "__pycache__").mkdir()
    (tmp_path / "a" / "__pycache__" / "z.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "stray.pyc").write_bytes(b"\0")
    assert _provenance.tree_digest(str(tmp_path)) == before


def test_a_changed_or_renamed_file_changes_it(tmp_path):
    _tree(tmp_path)
    before = _provenance.tree_digest(str(tmp_path))
    (tmp_path / "a" / "z.py").write_text("2 ")
    changed = _provenance.tree_digest(str(tmp_path))
    (tmp_path / "a" / "z.py").rename(tmp_path / "a" / "y.py")
    renamed = _provenance.tree_digest(str(tmp_path))
    assert len({before, changed, renamed}) == 3


def test_fa_shims_own_sources_are_that_digest_of_its_package():
    assert _provenance.fa_shim_sources() == _pathlib_digest(PACKAGE)
