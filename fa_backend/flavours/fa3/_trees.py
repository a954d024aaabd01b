"""FlashAttention-3's two source trees: their files (from a directory or a .tar.gz, links refused,
build outputs ignored), their content pins and their lay-out as a checkout has them. A pin is the
sha256 of what `sha256sum` prints for the sorted files, so a tarball and a checkout pin alike:
`find LICENSE hopper -type f | LC_ALL=C sort | xargs sha256sum | sha256sum`. Read before anything
is built: the hopper tree's `__version__`, its PKG-INFO, and whether its setup.py builds what the
registry claims.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import os
import re
import shutil
import stat
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from packaging.version import InvalidVersion, Version

from .. import api
from ..api import FaShimError
from . import _releases, _units

# what `python setup.py` and an editor leave in a checkout; git tracks none of it
IGNORED_DIRS = frozenset({"__pycache__", "build", "dist", ".git"})
IGNORED_SUFFIXES = (".egg-info", ".so", ".o", ".pyc")
BLOCK = 1 << 20
_VERSION = re.compile(r"^__version__\s*=\s*(.+)$", re.MULTILINE)
_TARGET = re.compile(r"-DTORCH_TARGET_VERSION=(0x[0-9A-Fa-f]+)")


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str  # in messages
    members: tuple[str, ...]  # top-level entries of the tree root that are the tree
    marker: str  # the directory that identifies a tree root
    in_checkout: str  # where a flash-attention checkout holds the root
    repo: str  # its GitHub repository, owner/name


HOPPER = Kind("hopper", ("LICENSE", "hopper"), "hopper", ".", "Dao-AILab/flash-attention")
CUTLASS = Kind("cutlass", ("LICENSE.txt", "include"), "include", "csrc/cutlass", "NVIDIA/cutlass")


@dataclasses.dataclass(frozen=True)
class Tree:
    kind: Kind
    path: Path  # a tree root directory, or a .tar.gz
    origin: str  # where it was found, for messages
    pin: str  # checked against the release's


def _ignored(parts: tuple[str, ...]) -> bool:
    return any(p in IGNORED_DIRS or p.endswith(IGNORED_SUFFIXES) for p in parts)


def in_tree(parts: tuple[str, ...], kind: Kind) -> bool:
    return bool(parts) and parts[0] in kind.members and not _ignored(parts)


def link_error(where: str, kind: Kind) -> FaShimError:
    return FaShimError(
        f"the {kind.name} tree holds a link or special file ({where}); upstream's has none.",
        fix="use a clean checkout or the upstream tarball (docs/fa3-design.md).",
    )


def _dir_files(root: Path, kind: Kind) -> Iterator[tuple[str, Iterator[bytes]]]:
    """(path relative to root, its bytes) for each file of the tree under a directory root."""
    found = []
    for member in kind.members:
        top = root / member
        if top.is_symlink() or (top.exists() and not (top.is_dir() or top.is_file())):
            raise link_error(str(top), kind)
        if top.is_file():
            found.append(member)
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            rel = Path(dirpath).relative_to(root).parts
            dirnames[:] = [d for d in dirnames if not _ignored((*rel, d))]
            for name in [*dirnames, *filenames]:
                if _ignored((*rel, name)):
                    continue
                mode = os.lstat(os.path.join(dirpath, name)).st_mode
                if stat.S_ISLNK(mode) or not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                    raise link_error(os.path.join(dirpath, name), kind)
            found += ["/".join((*rel, f)) for f in filenames if in_tree((*rel, f), kind)]
    for rel in sorted(found):
        with (root / rel).open("rb") as f:
            yield rel, iter(lambda f=f: f.read(BLOCK), b"")


def _unreadable(path: Path, kind: Kind, exc: BaseException) -> FaShimError:
    return FaShimError(
        f"{path} is not a readable .tar.gz of the {kind.name} tree ({exc or type(exc).__name__}).",
        fix=f"replace {path} with an intact copy (upstream tarball or `git archive`).",
    )


def _blocks(f: IO[bytes], path: Path, kind: Kind) -> Iterator[bytes]:
    """A member's bytes; a truncated or corrupt archive fails here, while it is read."""
    try:
        yield from iter(lambda: f.read(BLOCK), b"")
    except api.BROKEN_ARCHIVE as exc:
        raise _unreadable(path, kind, exc) from None


def _tar_files(path: Path, kind: Kind) -> Iterator[tuple[str, Iterator[bytes]]]:
    """The same for a .tar.gz with one top directory, streamed; every member must be safe."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            top = None
            for member in tar:
                parts = api.member_parts(member, top)
                top = parts[0]
                if not in_tree(parts[1:], kind) or member.isdir():
                    continue
                f = tar.extractfile(member)
                assert f is not None
                yield "/".join(parts[1:]), _blocks(f, path, kind)
    except api.UnsafeMember as exc:
        fix = "use the upstream tarball or `git archive` of the tree (docs/fa3-design.md)."
        raise api.unsafe_error(path, exc, fix) from None
    except api.BROKEN_ARCHIVE as exc:
        raise _unreadable(path, kind, exc) from None


def files(path: Path, kind: Kind) -> Iterator[tuple[str, Iterator[bytes]]]:
    return _tar_files(path, kind) if path.is_file() else _dir_files(path, kind)


class _Manifest:
    """Builds the pin: one `sha256sum` line per file, sorted by path, hashed."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def add(self, rel: str, blocks: Iterator[bytes], out: IO[bytes] | None = None) -> None:
        h = hashlib.sha256()
        for block in blocks:
            h.update(block)
            if out is not None:
                out.write(block)
        self.lines.append((rel, h.hexdigest()))

    def pin(self) -> str:
        text = "".join(f"{digest}  {rel}\n" for rel, digest in sorted(self.lines))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def __len__(self) -> int:
        return len(self.lines)


def pin_of(path: Path, kind: Kind) -> str:
    """The content pin of a tree root directory or a .tar.gz."""
    manifest = _Manifest()
    for rel, blocks in files(path, kind):
        manifest.add(rel, blocks)
    if not manifest:
        raise FaShimError(
            f"{path} holds no file of the {kind.name} tree ({', '.join(kind.members)}).",
            fix="point at the tree's root, its parent, or its tarball (docs/fa3-design.md).",
        )
    return manifest.pin()


def tree_root(path: Path, kind: Kind) -> Path:
    """A directory holding the tree (`hopper/` or `include/`), or one directory that does."""
    if (path / kind.marker).is_dir():
        return path
    inner = [p for p in path.iterdir() if (p / kind.marker).is_dir()] if path.is_dir() else []
    if len(inner) == 1:
        return inner[0]
    raise FaShimError(
        f"{path} holds no {kind.marker}/ directory, nor one directory that does: it is not the "
        f"{kind.name} tree.",
        fix=f"point at the directory holding {kind.marker}/, or at the tree's .tar.gz.",
    )


def lay_out(trees: Iterable[Tree], dest: Path) -> Path:
    """Copy both trees to dest (made here) as a checkout has them and return dest/hopper; what
    is copied is pinned again, so a tree changed since `locate` is refused, not built."""
    dest.mkdir(parents=True)
    try:
        for tree in trees:
            root = dest / tree.kind.in_checkout
            manifest = _Manifest()
            for rel, blocks in files(tree.path, tree.kind):
                target = root / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("wb") as out:
                    manifest.add(rel, blocks, out)
            if manifest.pin() != tree.pin:
                raise FaShimError(
                    f"the {tree.kind.name} tree {tree.path} changed while it was copied (its "
                    f"content pin is now {manifest.pin()}).",
                    fix="leave the sources alone during the build, and build again.",
                )
    except BaseException as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno in api.NO_SPACE:
            raise api.no_space(dest, "laying out the FlashAttention-3 sources") from None
        raise
    return dest / "hopper"


def read(tree: Tree, rel: str) -> str:
    for name, blocks in files(tree.path, tree.kind):
        if name == rel:
            return b"".join(blocks).decode("utf-8")
    raise FaShimError(
        f"the {tree.kind.name} tree {tree.path} has no {rel}.",
        fix="give flash-attention's hopper tree (LICENSE + hopper/).",
    )


def upstream_version(init_py: str) -> str:
    """hopper/__init__.py's `__version__ = "3.0.0.b1"`, as PEP 440 normalises it (3.0.0b1)."""
    match = _VERSION.search(init_py)
    try:
        return str(Version(ast.literal_eval(match.group(1).strip()))) if match else ""
    except (ValueError, SyntaxError, InvalidVersion):
        return ""


def pkg_info(release: _releases.Fa3Release, python: str) -> str:
    """The PKG-INFO hopper/setup.py's setup() would write (FA3 has no sdist), torch left out."""
    return (
        "Metadata-Version: 2.1\n"
        "Name: flash-attn-3\n"
        "Version: 0\n"
        f"Summary: FlashAttention-3 (flash-attention {release.described}, hopper/), built by "
        "fa-shim\n"
        "Home-page: https://github.com/Dao-AILab/flash-attention\n"
        "License: BSD-3-Clause\n"
        f"Requires-Python: >={python}\n"
        "Requires-Dist: einops\n"
        "Requires-Dist: packaging\n"
        "Requires-Dist: ninja\n"
    )


def check_stable_claim(release: _releases.Fa3Release, setup_py: str) -> None:
    """A stable line's setup.py builds flash_api_stable.cpp for the release's target."""
    targets = {api.target_version(v) for v in _TARGET.findall(setup_py)}
    if _units.api_source(release) not in setup_py or targets != {release.torch_target}:
        raise FaShimError(
            f"vendored_patches/fa3/{release.version}/release.toml says torch's stable ABI from "
            f"torch {release.torch_target}, but its hopper/setup.py builds "
            f"{_units.api_source(release)} with TORCH_TARGET_VERSION "
            f"{', '.join(sorted(str(t) for t in targets)) or 'never'}.",
            fix=f"correct release.toml ({_releases.GUIDE}).",
        )
