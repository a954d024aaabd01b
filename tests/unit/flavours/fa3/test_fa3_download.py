"""FlashAttention-3's trees downloaded as GitHub archives (fa_backend/flavours/fa3/_sources.py,
the last resort of `locate`). GitHub is not reachable here, so a real HTTP server on loopback serves
GitHub-shaped archives of the whole repositories, built from ../shared/fa3 (the fixtures skip
without it); FA_SHIM_FA3_DOWNLOAD_URL points fa-shim at it."""

from __future__ import annotations

import http.server
import io
import os
import socket
import stat
import tarfile
import threading
from pathlib import Path

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.flavours.fa3 import _releases as _fa3_releases
from fa_backend.flavours.fa3 import _sources as _fa3_sources
from fa_backend.flavours.fa3 import _trees
from fa_backend.flavours.fa3._trees import CUTLASS, HOPPER

RELEASE = _fa3_releases.release("2.8.3")
# outside both trees: in the repositories' archives, never in the cached tarballs
EXTRA = {
    HOPPER: {"README.md": b"# FlashAttention\n", "csrc/flash_attn/flash_api.cpp": b"// FA2\n"},
    CUTLASS: {"README.md": b"# CUTLASS\n", "tools/x.py": b"print('tool')\n"},
}


def _github_archive(tarball: Path, kind, change: str | None = None) -> bytes:
    """What GitHub serves for <repo>/archive/<commit>.tar.gz: one top directory
    <name>-<commit>/, the commit in a pax global header, the whole repository (here: the tree
    plus EXTRA). `change` flips one byte of that file of the tree."""
    commit = _fa3_sources.commit(RELEASE, kind)
    top = f"{kind.repo.split('/')[1]}-{commit}"
    out = io.BytesIO()
    with (
        tarfile.open(tarball) as src,
        tarfile.open(
            fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT, pax_headers={"comment": commit}
        ) as dst,
    ):
        for member in src:
            rest = member.name.split("/", 1)[1:]
            data = src.extractfile(member).read() if member.isfile() else None
            member.name = "/".join([top, *rest])
            if data is not None and rest == [change]:
                data = data[:100] + bytes([data[100] ^ 1]) + data[101:]
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
        for rel, data in EXTRA[kind].items():
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(data)
            dst.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _path(kind) -> str:
    return f"/{kind.repo}/archive/{_fa3_sources.commit(RELEASE, kind)}.tar.gz"


@pytest.fixture(scope="session")
def github_archives(fa3_tarballs) -> dict[str, bytes]:
    """URL path -> body, as GitHub lays them out; plus a hopper archive with one changed byte."""
    archives = {_path(k): _github_archive(fa3_tarballs[k.name], k) for k in (HOPPER, CUTLASS)}
    archives["changed"] = _github_archive(fa3_tarballs["hopper"], HOPPER, "hopper/flash_api.cpp")
    return archives


class _Server(http.server.ThreadingHTTPServer):
    served: dict[str, bytes]  # URL path -> body
    requests: list[str]  # the paths asked for, in order

    @property
    def port(self) -> int:
        return self.server_address[1]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self):
        self.server.requests.append(self.path)
        body = self.server.served.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def github(github_archives, monkeypatch):
    """A loopback server with GitHub's archive layout, fa-shim pointed at it."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.served = {k: v for k, v in github_archives.items() if k.startswith("/")}
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setenv(_fa3_sources.DOWNLOAD_URL_VARIABLE, f"http://127.0.0.1:{server.port}")
    for variable in ("no_proxy", "NO_PROXY"):  # a proxy of the machine must not take loopback
        monkeypatch.setenv(variable, "127.0.0.1")
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def _leftovers(cache: Path) -> list[str]:
    return sorted(os.listdir(cache)) if cache.exists() else []


def test_download_into_an_empty_cache_then_the_cache_is_used(
    github, fa3_tarballs, tmp_path, capsys
):
    cache = _fa3_sources.cache_dir(tmp_path)
    sources = _fa3_sources.locate(RELEASE, tmp_path, download=True)
    assert sorted(github.requests) == sorted([_path(HOPPER), _path(CUTLASS)])
    names = {k: _fa3_sources.archive_name(RELEASE, k) for k in (HOPPER, CUTLASS)}
    assert _leftovers(cache) == sorted(names.values())  # no temporary file left
    for tree, kind in ((sources.hopper, HOPPER), (sources.cutlass, CUTLASS)):
        assert tree.path == cache / names[kind]
        assert tree.pin == _fa3_sources.expected_pin(RELEASE, kind)
        assert _trees.pin_of(tree.path, kind) == tree.pin  # the published bytes
        assert tree.origin.startswith(f"http://127.0.0.1:{github.port}/{kind.repo}/archive/")
        # shaped like ../shared/fa3's: one top directory, as `git archive --prefix` makes it
        with tarfile.open(tree.path) as tar:
            members = tar.getnames()
            assert tar.pax_headers["comment"] == _fa3_sources.commit(RELEASE, kind)
        with tarfile.open(fa3_tarballs[kind.name]) as shared:
            assert members == shared.getnames()  # and so none of EXTRA
    stderr = capsys.readouterr()
    assert "downloading flash-attention v2.8.3's cutlass tree from http://" in stderr.err
    assert "verified" in stderr.err and stderr.out == ""

    again = _fa3_sources.locate(RELEASE, tmp_path, download=True)
    assert len(github.requests) == 2  # no request: the cache answered
    assert again.hopper.origin == again.cutlass.origin == "fa-shim cache"
    assert (again.hopper.pin, again.cutlass.pin) == (RELEASE.hopper_pin, RELEASE.cutlass_pin)
    laid_out = _trees.lay_out(again.trees, tmp_path / "src")
    assert (laid_out / "flash_api.cpp").is_file() and not (tmp_path / "src/README.md").exists()


def test_a_changed_byte_is_one_pin_error_and_nothing_is_cached(github, github_archives, tmp_path):
    github.served[_path(HOPPER)] = github_archives["changed"]
    with pytest.raises(FaShimError) as info:
        _fa3_sources.locate(RELEASE, tmp_path, download=True)
    cause = info.value.cause
    assert f"the hopper tree downloaded from http://127.0.0.1:{github.port}{_path(HOPPER)}" in cause
    assert f"v2.8.3 pins {RELEASE.hopper_pin}" in cause and "nothing of it was written" in cause
    assert _fa3_sources.DOWNLOAD_URL_VARIABLE in info.value.fix
    assert github.requests == [_path(HOPPER)]
    assert _leftovers(_fa3_sources.cache_dir(tmp_path)) == []  # no tarball, no temporary file


def test_a_404_is_one_error_naming_the_url(github, tmp_path):
    del github.served[_path(CUTLASS)]
    with pytest.raises(FaShimError) as info:
        _fa3_sources.locate(RELEASE, tmp_path, download=True)
    url = f"http://127.0.0.1:{github.port}{_path(CUTLASS)}"
    assert f"cutlass tree from {url} failed: HTTP 404 Not Found" in info.value.cause
    assert "git clone --recursive" in info.value.fix
    # the hopper tree was whole and pinned: it stays cached; nothing of the cutlass one
    assert _leftovers(_fa3_sources.cache_dir(tmp_path)) == [
        _fa3_sources.archive_name(RELEASE, HOPPER)
    ]


def test_an_unreachable_host_is_one_error_naming_the_url(monkeypatch, tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(_fa3_sources.DOWNLOAD_URL_VARIABLE, f"http://127.0.0.1:{port}/")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    with pytest.raises(FaShimError) as info:
        _fa3_sources.locate(RELEASE, tmp_path, download=True)
    assert f"from http://127.0.0.1:{port}{_path(HOPPER)} failed: " in info.value.cause
    assert "Connection refused" in info.value.cause
    assert _leftovers(_fa3_sources.cache_dir(tmp_path)) == []


def test_a_body_that_is_not_a_tarball_is_one_error(github, tmp_path):
    github.served[_path(HOPPER)] = b"<html>rate limited</html>"
    with pytest.raises(FaShimError) as info:
        _fa3_sources.locate(RELEASE, tmp_path, download=True)
    assert "failed: it is not a readable .tar.gz (" in info.value.cause
    assert _path(HOPPER) in info.value.cause
    assert _leftovers(_fa3_sources.cache_dir(tmp_path)) == []


def test_a_link_in_the_downloaded_tree_is_one_error(github, tmp_path):
    top = f"flash-attention-{RELEASE.commit}"
    body = io.BytesIO()
    with tarfile.open(fileobj=body, mode="w:gz") as tar:
        link = tarfile.TarInfo(f"{top}/hopper/flash.h")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/hostname"
        tar.addfile(link)
    github.served[_path(HOPPER)] = body.getvalue()
    with pytest.raises(FaShimError) as info:
        _fa3_sources.locate(RELEASE, tmp_path, download=True)
    assert _path(HOPPER) in info.value.cause
    assert f"unsafe archive member {top}/hopper/flash.h (a symbolic link)" in info.value.cause
    assert _leftovers(_fa3_sources.cache_dir(tmp_path)) == []


def test_without_download_nothing_is_requested(github, tmp_path):
    with pytest.raises(FaShimError) as info:
        _fa3_sources.locate(RELEASE, tmp_path, shared_dir=tmp_path / "shared")
    assert "there is no flash-attention-v2.8.3-hopper.tar.gz in" in info.value.cause
    assert "downloading is off" in info.value.cause
    assert github.requests == []


def test_the_cached_tarballs_honour_the_umask(github, tmp_path):
    old = os.umask(0o027)
    try:
        sources = _fa3_sources.locate(RELEASE, tmp_path, download=True)
    finally:
        os.umask(old)
    assert stat.S_IMODE(_fa3_sources.cache_dir(tmp_path).stat().st_mode) == 0o750
    for tree in (sources.hopper, sources.cutlass):
        assert stat.S_IMODE(tree.path.stat().st_mode) == 0o640, tree.path


def test_the_default_base_is_github(monkeypatch):
    monkeypatch.delenv(_fa3_sources.DOWNLOAD_URL_VARIABLE, raising=False)
    assert _fa3_sources.download_url(RELEASE, HOPPER) == (
        "https://github.com/Dao-AILab/flash-attention/archive/"
        "060c9188beec3a8b62b33a3bfa6d5d2d44975fab.tar.gz"
    )
    assert _fa3_sources.download_url(RELEASE, CUTLASS) == (
        "https://github.com/NVIDIA/cutlass/archive/dc4817921edda44a549197ff3a9dcf5df0636e7b.tar.gz"
    )
