"""Find FlashAttention-3's two source trees, check them against their content pins, lay them out.

The hopper tree is flash-attention's `LICENSE` + `hopper/**`, the cutlass tree CUTLASS's
`LICENSE.txt` + `include/**` (the `csrc/cutlass` submodule). Each comes from a flash-attention
checkout with its submodule, a directory, a `.tar.gz` with one top directory, a shared directory
or fa-shim's cache (as `archive_name` names them), first found wins; last, when `locate` is
told it may, GitHub's archive of each repository at the pinned commit is downloaded, the tree cut
out of it, pinned and only then published in the cache under its `archive_name`.

`FA_SHIM_FA3_DOWNLOAD_URL` replaces `https://github.com` as the base of those downloads: a hook
for tests and for mirrors with GitHub's layout (`<base>/<owner>/<repo>/archive/<commit>.tar.gz`).

The pin is by content, never by archive bytes: sha256 of the manifest `sha256sum` prints for the
tree's files (paths relative to the tree root, sorted bytewise), so a tarball, its extraction and
a checkout pin alike: `find LICENSE hopper -type f | LC_ALL=C sort | xargs sha256sum | sha256sum`.
Build outputs a checkout may hold are neither pinned nor copied; links are refused. See
docs/fa3-design.md.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO

from ...core import _atomic, _failures, _log
from ...core._errors import FaShimError
from ...sources import _index
from ._fa3_releases import Fa3Release

# what `python setup.py` and an editor leave in a checkout; git tracks none of it
IGNORED_DIRS = frozenset({"__pycache__", "build", "dist", ".git"})
IGNORED_SUFFIXES = (".egg-info", ".so", ".o", ".pyc")
_BLOCK = 1 << 20


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str  # in messages
    members: tuple[str, ...]  # top-level entries of the tree root that are the tree
    marker: str  # the directory that identifies a tree root
    in_checkout: str  # where a flash-attention checkout holds the root
    repo: str  # its GitHub repository, owner/name


HOPPER = Kind("hopper", ("LICENSE", "hopper"), "hopper", ".", "Dao-AILab/flash-attention")
CUTLASS = Kind("cutlass", ("LICENSE.txt", "include"), "include", "csrc/cutlass", "NVIDIA/cutlass")

DOWNLOAD_URL_VARIABLE = "FA_SHIM_FA3_DOWNLOAD_URL"
GITHUB = "https://github.com"
TIMEOUT = 60  # seconds without a byte, as for the package index


@dataclasses.dataclass(frozen=True)
class Tree:
    kind: Kind
    path: Path  # a tree root directory, or a .tar.gz
    origin: str  # where it was found, for messages
    pin: str  # checked against the release's


@dataclasses.dataclass(frozen=True)
class Sources:
    release: Fa3Release
    hopper: Tree
    cutlass: Tree


def archive_name(release: Fa3Release, kind: Kind) -> str:
    """The file name of a tree in a shared directory or fa-shim's cache."""
    if kind is HOPPER:
        return f"flash-attention-{release.tag}-hopper.tar.gz"
    return f"cutlass-{release.cutlass_commit}-include.tar.gz"


def archive_top(release: Fa3Release, kind: Kind) -> str:
    """The one top directory of archive_name's tarball (`git archive --prefix`)."""
    if kind is HOPPER:
        return f"flash-attention-{release.tag}"
    return f"cutlass-{release.cutlass_commit}"


def commit(release: Fa3Release, kind: Kind) -> str:
    return release.commit if kind is HOPPER else release.cutlass_commit


def download_url(release: Fa3Release, kind: Kind) -> str:
    """GitHub's archive of the tree's repository at the pinned commit (or a mirror's)."""
    base = os.environ.get(DOWNLOAD_URL_VARIABLE) or GITHUB
    return f"{base.rstrip('/')}/{kind.repo}/archive/{commit(release, kind)}.tar.gz"


def cache_dir(cache_root: Path) -> Path:
    """Where fa-shim's cache (cache-dir) keeps the trees, under their archive_name."""
    return cache_root / "fa3-sources"


def expected_pin(release: Fa3Release, kind: Kind) -> str:
    return release.hopper_pin if kind is HOPPER else release.cutlass_pin


# ------------------------------------------------------------------------------ the files


def _ignored(parts: tuple[str, ...]) -> bool:
    return any(p in IGNORED_DIRS or p.endswith(IGNORED_SUFFIXES) for p in parts)


def _in_tree(parts: tuple[str, ...], kind: Kind) -> bool:
    return bool(parts) and parts[0] in kind.members and not _ignored(parts)


def _link_error(where: str, kind: Kind) -> FaShimError:
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
            raise _link_error(str(top), kind)
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
                    raise _link_error(os.path.join(dirpath, name), kind)
            found += ["/".join((*rel, f)) for f in filenames if _in_tree((*rel, f), kind)]
    for rel in sorted(found):
        with (root / rel).open("rb") as f:
            yield rel, iter(lambda f=f: f.read(_BLOCK), b"")


def _unreadable(path: Path, kind: Kind, exc: BaseException) -> FaShimError:
    return FaShimError(
        f"{path} is not a readable .tar.gz of the {kind.name} tree ({exc or type(exc).__name__}).",
        fix=f"replace {path} with an intact copy (upstream tarball or `git archive`).",
    )


_BROKEN = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


def _blocks(f: IO[bytes], path: Path, kind: Kind) -> Iterator[bytes]:
    """A member's bytes; a truncated or corrupt archive fails here, while it is read."""
    try:
        yield from iter(lambda: f.read(_BLOCK), b"")
    except _BROKEN as exc:
        raise _unreadable(path, kind, exc) from None


def _member_parts(name: str, top: str | None) -> tuple[str, tuple[str, ...]]:
    """A member's path parts, refused when unsafe or outside the archive's one top directory
    (`top`: the first member's, None before it)."""
    parts = PurePosixPath(name).parts
    if not parts or parts[0] in ("/", "..") or ".." in parts:
        raise tarfile.TarError(f"unsafe member {name}")
    if top is not None and parts[0] != top:
        raise tarfile.TarError(f"more than one top directory ({top}, {parts[0]})")
    return parts[0], parts


def _tar_files(path: Path, kind: Kind) -> Iterator[tuple[str, Iterator[bytes]]]:
    """The same for a .tar.gz with one top directory, streamed in archive order."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            top = None
            for member in tar:
                top, parts = _member_parts(member.name, top)
                if not _in_tree(parts[1:], kind) or member.isdir():
                    continue
                if not member.isfile():
                    raise _link_error(f"{path}: {member.name}", kind)
                f = tar.extractfile(member)
                assert f is not None
                yield "/".join(parts[1:]), _blocks(f, path, kind)
    except _BROKEN as exc:
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


# ------------------------------------------------------------------------------- locating


def tree_root(path: Path, kind: Kind) -> Path:
    """A directory holding the tree (`hopper/` or `include/`), or holding one directory that
    does (an extracted tarball)."""
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


def _checked(path: Path, kind: Kind, release: Fa3Release, origin: str) -> Tree:
    got, want = pin_of(path, kind), expected_pin(release, kind)
    if got != want:
        if origin == "fa-shim cache":
            fix = f"delete {path}; fa-shim gets it again."
        elif origin.startswith("checkout"):
            fix = (
                f"make the checkout clean at {release.tag} (`git status`; `git checkout "
                f"{release.tag} && git submodule update --init csrc/cutlass`), or use the tarballs."
            )
        else:
            fix = (
                f"use {release.tag}'s tree (commit {release.commit}, CUTLASS "
                f"{release.cutlass_commit}) as `git archive` or GitHub exports it."
            )
        raise FaShimError(
            f"the {kind.name} tree from {origin} ({path}) is not flash-attention "
            f"{release.tag}'s: its content pin is {got}, {release.tag} pins {want}.",
            fix=fix,
        )
    _log.info(f"using the {kind.name} tree {path} (from {origin}, pin {got[:12]}… verified)")
    return Tree(kind, path, origin, got)


def _find(
    kind: Kind,
    release: Fa3Release,
    explicit: Path | None,
    checkout: Path | None,
    shared_dir: Path | None,
    cache_root: Path,
    download: bool,
) -> Tree:
    if explicit is not None:
        if not explicit.exists():
            raise FaShimError(
                f"the {kind.name} tree {explicit} does not exist.",
                fix="pass a directory or a .tar.gz of the tree.",
            )
        path = explicit if explicit.is_file() else tree_root(explicit, kind)
        return _checked(path, kind, release, f"the given {kind.name} tree")
    if checkout is not None:
        root = checkout / kind.in_checkout
        if not (root / kind.marker).is_dir():
            fix = (
                f"run `git -C {checkout} submodule update --init csrc/cutlass`."
                if kind is CUTLASS
                else "point at the root of a flash-attention clone."
            )
            raise FaShimError(
                f"the flash-attention checkout {checkout} has no {kind.in_checkout}/"
                f"{kind.marker}/.",
                fix=fix,
            )
        return _checked(root, kind, release, f"checkout {checkout}")
    name = archive_name(release, kind)
    cache = cache_dir(cache_root)
    for directory, origin in ((shared_dir, f"directory {shared_dir}"), (cache, "fa-shim cache")):
        if directory is not None and (directory / name).is_file():
            return _checked(directory / name, kind, release, origin)
    if download:
        return _download(kind, release, cache)
    where = f"{shared_dir} or {cache}" if shared_dir else str(cache)
    raise FaShimError(
        f"FlashAttention-3 needs flash-attention {release.tag}'s {kind.name} tree, there "
        f"is no {name} in {where}, and downloading is off (offline).",
        fix=f"{_give(release)}, or allow downloading (-C offline=false).",
    )


def _give(release: Fa3Release) -> str:
    return (
        f"give a flash-attention clone of {release.tag} with its submodule "
        "(`git clone --recursive`), or the two trees as directories or tarballs "
        "(docs/fa3-design.md)"
    )


def locate(
    release: Fa3Release,
    cache_root: Path,
    *,
    checkout: Path | None = None,
    hopper: Path | None = None,
    cutlass: Path | None = None,
    shared_dir: Path | None = None,
    download: bool = False,
) -> Sources:
    """Both trees, each checked against its pin: an explicit tree > the checkout > the shared
    directory > fa-shim's cache (cache_root: the cache-dir setting's directory) > when download
    is true, GitHub's archive (download_url), cut to the tree and published in the cache."""
    return Sources(
        release,
        _find(HOPPER, release, hopper, checkout, shared_dir, cache_root, download),
        _find(CUTLASS, release, cutlass, checkout, shared_dir, cache_root, download),
    )


# ------------------------------------------------------------------------------ downloading


def _download_failed(release: Fa3Release, kind: Kind, url: str, reason: str) -> FaShimError:
    return FaShimError(
        f"downloading flash-attention {release.tag}'s {kind.name} tree from "
        f"{_index.redact(url)} failed: {reason}; nothing of it was written to the cache.",
        fix=f"check the network (a proxy goes in https_proxy), or {_give(release)}.",
    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    reason = getattr(exc, "reason", None) or exc
    return str(reason) or type(reason).__name__


def _fetch(url: str, out: IO[bytes], release: Fa3Release, kind: Kind) -> int:
    """Stream url's body into out; the number of bytes. Network failures are the one error,
    a failed write to out (a full disk) stays an OSError."""
    request = urllib.request.Request(url, headers={"User-Agent": "fa-shim"})
    try:  # build_opener: proxies from the environment (https_proxy, no_proxy), as pip
        response = urllib.request.build_opener().open(request, timeout=TIMEOUT)
    except _index.FETCH_ERRORS as exc:
        raise _download_failed(release, kind, url, _reason(exc)) from None
    size = 0
    with response:
        length = response.headers.get("Content-Length")
        while True:
            try:
                block = response.read(_BLOCK)
            except _index.FETCH_ERRORS as exc:
                raise _download_failed(release, kind, url, _reason(exc)) from None
            if not block:
                break
            out.write(block)
            size += len(block)
    # http.client ends a body cut short of its Content-Length quietly
    if length is not None and length.isdigit() and int(length) != size:
        reason = f"the connection closed after {size} of {length} bytes"
        raise _download_failed(release, kind, url, reason)
    return size


def _cut(archive: IO[bytes], out: IO[bytes], release: Fa3Release, kind: Kind) -> _Manifest:
    """Write the tree's entries of a GitHub archive (one top directory, the whole repository)
    to out as a .tar.gz under archive_top, as `git archive --prefix` makes it; the manifest of
    what was written."""
    top = archive_top(release, kind)
    manifest = _Manifest()
    with (
        tarfile.open(fileobj=archive, mode="r:gz") as src,
        tarfile.open(
            fileobj=out,
            mode="w:gz",
            format=tarfile.PAX_FORMAT,
            pax_headers={"comment": commit(release, kind)},  # where git archive keeps it
        ) as dst,
    ):
        root = None
        for member in src:
            root, parts = _member_parts(member.name, root)
            rest = parts[1:]
            if rest and not _in_tree(rest, kind):
                continue
            # a fresh header: the member's own pax headers would keep its old path
            info = tarfile.TarInfo("/".join((top, *rest)))
            info.mtime, info.mode = member.mtime, member.mode
            info.uname = info.gname = "root"
            if member.isdir():
                info.type = tarfile.DIRTYPE
                dst.addfile(info)
                continue
            if not member.isfile():
                raise _link_error(member.name, kind)
            f = src.extractfile(member)
            assert f is not None
            data = io.BytesIO()
            manifest.add("/".join(rest), iter(lambda f=f: f.read(_BLOCK), b""), data)
            info.size = data.tell()
            data.seek(0)
            dst.addfile(info, data)
    return manifest


def _download(kind: Kind, release: Fa3Release, cache: Path) -> Tree:
    """GitHub's archive streamed to an unnamed temporary file in the cache, the tree cut out
    of it into a tarball beside its final name, pinned, then renamed into place."""
    url = download_url(release, kind)
    shown = _index.redact(url)
    target = cache / archive_name(release, kind)
    _log.info(f"downloading flash-attention {release.tag}'s {kind.name} tree from {shown}")
    try:
        cache.mkdir(parents=True, exist_ok=True)  # 0o777 & ~umask
        # TemporaryFile has no name on Linux (O_TMPFILE): nothing is left however this ends
        with tempfile.TemporaryFile(dir=cache, prefix=".fa-shim-", suffix=".part") as archive:
            size = _fetch(url, archive, release, kind)
            archive.seek(0)
            with _atomic.writing(target) as out:
                try:
                    manifest = _cut(archive, out, release, kind)
                except _BROKEN as exc:
                    why = f"it is not a readable .tar.gz ({exc or type(exc).__name__})"
                    raise _download_failed(release, kind, url, why) from None
                except FaShimError as exc:  # a link in the tree
                    raise _download_failed(release, kind, url, exc.cause.rstrip(".")) from None
                got, want = manifest.pin(), expected_pin(release, kind)
                if got != want:
                    raise FaShimError(
                        f"the {kind.name} tree downloaded from {shown} is not flash-attention "
                        f"{release.tag}'s: its content pin is {got}, {release.tag} pins {want}; "
                        "nothing of it was written to the cache.",
                        fix=f"a mirror or proxy serving other files? Check "
                        f"{DOWNLOAD_URL_VARIABLE} and the proxy, or {_give(release)}.",
                    )
    except OSError as exc:
        _failures.name_it(exc, cache)
        raise
    _log.info(
        f"{size / 1e6:.1f} MB downloaded; the {kind.name} tree cut out ({len(manifest)} files, "
        f"pin {got[:12]}… verified) into {target}"
    )
    return Tree(kind, target, shown, got)


# ------------------------------------------------------------------------------- laying out


def lay_out(sources: Sources, dest: Path) -> Path:
    """Copy both trees to dest as a flash-attention checkout has them (`hopper/`, `LICENSE`,
    `csrc/cutlass/include`, `csrc/cutlass/LICENSE.txt`) and return dest/hopper. What is copied
    is pinned again as it is written: a tree changed since `locate` is refused, not built."""
    try:
        for tree in (sources.hopper, sources.cutlass):
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
    except OSError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if exc.errno in _failures.NO_SPACE:
            raise _failures.no_space(dest, "laying out the FlashAttention-3 sources") from None
        raise
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest / "hopper"
