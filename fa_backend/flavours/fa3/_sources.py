"""Find FlashAttention-3's two source trees (flash-attention's `LICENSE` + `hopper/**`, CUTLASS's
`LICENSE.txt` + `include/**`) and check them against their content pins: from a checkout, a
directory, a `.tar.gz`, a shared directory or fa-shim's cache, first found wins; last, when
allowed, cut from GitHub's archive at the pinned commit (or `FA_SHIM_FA3_DOWNLOAD_URL`'s mirror
of it), pinned, and only then published in the cache. Reading and pinning a tree: _trees.
"""

from __future__ import annotations

import dataclasses
import io
import os
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from .. import api
from ..api import FaShimError, NotLocal
from ._releases import Fa3Release
from ._trees import (
    BLOCK,
    CUTLASS,
    HOPPER,
    Kind,
    Tree,
    _Manifest,
    in_tree,
    pin_of,
    tree_root,
)

DOWNLOAD_URL_VARIABLE = "FA_SHIM_FA3_DOWNLOAD_URL"
GITHUB = "https://github.com"
TIMEOUT = 60  # seconds without a byte, as for the package index


@dataclasses.dataclass(frozen=True)
class Sources:
    release: Fa3Release
    hopper: Tree
    cutlass: Tree

    @property
    def trees(self) -> tuple[Tree, Tree]:
        return self.hopper, self.cutlass


def archive_name(release: Fa3Release, kind: Kind) -> str:
    """The file name of a tree in a shared directory or fa-shim's cache."""
    return f"{archive_top(release, kind)}-{'hopper' if kind is HOPPER else 'include'}.tar.gz"


def archive_top(release: Fa3Release, kind: Kind) -> str:
    """The one top directory of archive_name's tarball (`git archive --prefix`)."""
    if kind is HOPPER:
        return f"flash-attention-{release.ref}"
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


def _checked(path: Path, kind: Kind, release: Fa3Release, origin: str) -> Tree:
    got, want = pin_of(path, kind), expected_pin(release, kind)
    if got != want:
        if origin == "fa-shim cache":
            fix = f"delete {path}; fa-shim gets it again."
        elif origin.startswith("checkout"):
            fix = (
                f"make the checkout clean at {release.ref} (`git status`; `git checkout "
                f"{release.ref} && git submodule update --init csrc/cutlass`), or use the tarballs."
            )
        else:
            fix = (
                f"use {release.ref}'s tree (commit {release.commit}, CUTLASS "
                f"{release.cutlass_commit}) as `git archive` or GitHub exports it."
            )
        raise FaShimError(
            f"the {kind.name} tree from {origin} ({path}) is not flash-attention "
            f"{release.ref}'s: its content pin is {got}, {release.ref} pins {want}.",
            fix=fix,
        )
    api.info(f"using the {kind.name} tree {path} (from {origin}, pin {got[:12]}… verified)")
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
    raise NotLocal(
        f"FlashAttention-3 needs flash-attention {release.ref}'s {kind.name} tree, there "
        f"is no {name} in {where}, and downloading is off (offline).",
        fix=f"{_give(release)}, or allow downloading (-C offline=false).",
    )


def _give(release: Fa3Release) -> str:
    return (
        f"give a flash-attention clone of {release.ref} with its submodule "
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
    directory > fa-shim's cache under cache_root > a download, where allowed."""
    return Sources(
        release,
        _find(HOPPER, release, hopper, checkout, shared_dir, cache_root, download),
        _find(CUTLASS, release, cutlass, checkout, shared_dir, cache_root, download),
    )


def _download_failed(release: Fa3Release, kind: Kind, url: str, reason: str) -> FaShimError:
    return FaShimError(
        f"downloading flash-attention {release.ref}'s {kind.name} tree from "
        f"{api.redact(url)} failed: {reason}; nothing of it was written to the cache.",
        fix=f"check the network (a proxy goes in https_proxy), or {_give(release)}.",
    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    reason = getattr(exc, "reason", None) or exc
    return str(reason) or type(reason).__name__


def _fetch(url: str, out: IO[bytes], release: Fa3Release, kind: Kind) -> int:
    """Stream url's body into out; its size. A failed write (a full disk) stays an OSError."""
    request = urllib.request.Request(url, headers={"User-Agent": "fa-shim"})
    try:  # build_opener: proxies from the environment (https_proxy, no_proxy), as pip
        response = urllib.request.build_opener().open(request, timeout=TIMEOUT)
    except api.FETCH_ERRORS as exc:
        raise _download_failed(release, kind, url, _reason(exc)) from None
    size = 0
    with response:
        length = response.headers.get("Content-Length")
        while True:
            try:
                block = response.read(BLOCK)
            except api.FETCH_ERRORS as exc:
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
    """Write the tree's entries of a GitHub archive to out as `git archive --prefix` would (under
    archive_top); the manifest of what was written."""
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
            parts = api.member_parts(member, root)  # UnsafeMember: _download words it
            root, rest = parts[0], parts[1:]
            if rest and not in_tree(rest, kind):
                continue
            # a fresh header: the member's own pax headers would keep its old path
            info = tarfile.TarInfo("/".join((top, *rest)))
            info.mtime, info.mode = member.mtime, member.mode
            info.uname = info.gname = "root"
            if member.isdir():
                info.type = tarfile.DIRTYPE
                dst.addfile(info)
                continue
            f = src.extractfile(member)
            assert f is not None
            data = io.BytesIO()
            manifest.add("/".join(rest), iter(lambda f=f: f.read(BLOCK), b""), data)
            info.size = data.tell()
            data.seek(0)
            dst.addfile(info, data)
    return manifest


def _download(kind: Kind, release: Fa3Release, cache: Path) -> Tree:
    """GitHub's archive streamed to a temporary file, the tree cut out, pinned, then published."""
    url = download_url(release, kind)
    shown = api.redact(url)
    target = cache / archive_name(release, kind)
    api.info(f"downloading flash-attention {release.ref}'s {kind.name} tree from {shown}")
    try:
        cache.mkdir(parents=True, exist_ok=True)  # 0o777 & ~umask
        # TemporaryFile has no name on Linux (O_TMPFILE): nothing is left however this ends
        with tempfile.TemporaryFile(dir=cache, prefix=".fa-shim-", suffix=".part") as archive:
            size = _fetch(url, archive, release, kind)
            archive.seek(0)
            with api.atomic_writing(target) as out:
                try:
                    manifest = _cut(archive, out, release, kind)
                except api.UnsafeMember as exc:
                    why = f"it holds an unsafe archive member {exc.name} ({exc.why})"
                    raise _download_failed(release, kind, url, why) from None
                except api.BROKEN_ARCHIVE as exc:
                    why = f"it is not a readable .tar.gz ({exc or type(exc).__name__})"
                    raise _download_failed(release, kind, url, why) from None
                got, want = manifest.pin(), expected_pin(release, kind)
                if got != want:
                    raise FaShimError(
                        f"the {kind.name} tree downloaded from {shown} is not flash-attention "
                        f"{release.ref}'s: its content pin is {got}, {release.ref} pins {want}; "
                        "nothing of it was written to the cache.",
                        fix=f"a mirror or proxy serving other files? Check "
                        f"{DOWNLOAD_URL_VARIABLE} and the proxy, or {_give(release)}.",
                    )
    except OSError as exc:
        api.name_os_error(exc, cache)
        raise
    api.info(
        f"{size / 1e6:.1f} MB downloaded; the {kind.name} tree cut out ({len(manifest)} files, "
        f"pin {got[:12]}… verified) into {target}"
    )
    return Tree(kind, target, shown, got)
