"""The sdist download path, against a real HTTP package index on loopback, configured the way
users configure pip (PIP_INDEX_URL / pip.conf): only the sdist is ever taken, and it is cached."""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import json
import os
import sys
import threading
import venv
from pathlib import Path

import pytest
from conftest import PY, REPO, SAMPLE_VERSION, pack_sample, run

from fa_backend.core._errors import FaShimError
from fa_backend.sources import _index


@pytest.fixture
def index(tmp_path):
    """A PEP 503 simple index serving the sample sdist, a decoy wheel and another version."""
    root = tmp_path / "index"
    files = root / "files"
    sdist = pack_sample(files)
    pack_sample(files, "0.2.0")
    (files / f"flash_attn-{SAMPLE_VERSION}-cp311-cp311-linux_x86_64.whl").write_bytes(b"decoy")
    _write_page(root)
    handler = functools.partial(_Handler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"url": f"http://127.0.0.1:{server.server_port}/simple", "sdist": sdist, "root": root}
    server.shutdown()


def _write_page(root: Path) -> None:
    """The project page: a link with its sha256 for every file under root/files."""
    page = root / "simple" / "flash-attn"
    page.mkdir(parents=True, exist_ok=True)
    links = "".join(
        f'<a href="../../files/{p.name}#sha256={hashlib.sha256(p.read_bytes()).hexdigest()}">'
        f"{p.name}</a>\n"
        for p in sorted((root / "files").iterdir())
    )
    (page / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the index; with root/auth present, only to requests carrying that basic auth."""

    def do_GET(self):
        needed = Path(self.directory, "auth")
        if needed.is_file():
            token = base64.b64encode(needed.read_bytes()).decode()
            if self.headers.get("Authorization") != f"Basic {token}":
                self.send_error(401, "Unauthorized")
                return
        super().do_GET()


def _run_prepare(
    tmp_path: Path, index_url: str, name: str, check: bool = True, version: str = SAMPLE_VERSION
):
    """`python -m fa_backend prepare` of the sample with pip configured for just this index."""
    env = {
        **os.environ,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": index_url,
        "PIP_EXTRA_INDEX_URL": "",
    }
    command = [
        PY,
        "-m",
        "fa_backend",
        "prepare",
        "--build-dir",
        tmp_path / name,
        "-C",
        f"flash-attn-version={version}",
        "-C",
        "allow-unknown-version=true",
    ]
    return run(command, cwd=REPO, env=env, check=check)


def _prepare(tmp_path: Path, index_url: str, name: str) -> tuple[dict, str]:
    proc = _run_prepare(tmp_path, index_url, name)
    return json.loads(proc.stdout), proc.stderr


def test_downloads_the_sdist_through_pips_index_setting_then_uses_the_cache(index, tmp_path):
    summary, stderr = _prepare(tmp_path, index["url"], "first")
    assert (
        f"downloading {index['url'].rsplit('/simple', 1)[0]}/files/flash_attn-0.1.0.tar.gz"
        in stderr
    )
    cached = Path(os.environ["XDG_CACHE_HOME"]) / "fa-shim" / "sdists" / "flash_attn-0.1.0.tar.gz"
    assert cached.read_bytes() == index["sdist"].read_bytes()
    assert summary["provenance"]["sdist"]["origin"] == "package index"
    assert not list(cached.parent.glob(".partial-*"))
    summary, stderr = _prepare(tmp_path, "http://127.0.0.1:9/simple", "second")  # index gone
    assert summary["provenance"]["sdist"]["origin"] == "fa-shim cache"
    assert "downloading" not in stderr


def test_a_download_that_does_not_match_the_index_hash_is_refused(index, tmp_path):
    page = index["root"] / "simple" / "flash-attn" / "index.html"
    page.write_text(page.read_text().replace("#sha256=", "#sha256=0"))
    proc = _run_prepare(tmp_path, index["url"], "b", check=False)
    assert proc.returncode == 1
    assert "the index's sha256 does not match the downloaded bytes" in proc.stderr
    assert not (Path(os.environ["XDG_CACHE_HOME"]) / "fa-shim" / "sdists").exists() or not list(
        (Path(os.environ["XDG_CACHE_HOME"]) / "fa-shim" / "sdists").iterdir()
    )


def _sdist_cache() -> Path:
    return Path(os.environ["XDG_CACHE_HOME"]) / "fa-shim" / "sdists"


def test_bytes_that_are_not_the_pinned_release_never_enter_the_cache(index, tmp_path):
    """A mirror serving other bytes under a pinned name (with a hash that matches them)."""
    pack_sample(index["root"] / "files", "2.8.3")
    _write_page(index["root"])
    proc = _run_prepare(tmp_path, index["url"], "p", check=False, version="2.8.3")
    assert proc.returncode == 1
    assert "is not the upstream release's 1e71dd64a9e0280e" in proc.stderr
    assert not _sdist_cache().exists() or not list(_sdist_cache().iterdir())


def test_credentials_in_the_index_url_are_sent_and_never_printed(index, tmp_path, monkeypatch):
    (index["root"] / "auth").write_text("alice:s3cr@t")
    host = index["url"].removeprefix("http://")
    summary, stderr = _prepare(tmp_path, f"http://alice:s3cr%40t@{host}", "ok")
    assert summary["provenance"]["sdist"]["origin"] == "package index"
    assert "downloading http://alice:****@127.0.0.1" in stderr
    assert "s3cr" not in stderr
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))  # download again
    wrong = _run_prepare(tmp_path, f"http://alice:wr0ng@{host}", "no", check=False)
    assert wrong.returncode == 1 and "Unauthorized" in wrong.stderr
    assert "alice:****@" in wrong.stderr and "wr0ng" not in wrong.stderr


def test_without_pip_the_pip_and_uv_index_variables_are_read(tmp_path, monkeypatch):
    """uv's environments have no pip: `pip config list` cannot answer there."""
    venv.EnvBuilder(with_pip=False).create(tmp_path / "no-pip")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-pip" / "bin" / "python"))
    for name in list(os.environ):
        if name.startswith(("PIP_", "UV_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("UV_INDEX_URL", "https://mirror.example/simple")
    monkeypatch.setenv("UV_INDEX", "internal=https://a.example/simple https://b.example/simple")
    monkeypatch.setenv("PIP_TRUSTED_HOST", "a.example")
    assert _index.pip_config() == {
        "index-url": "https://mirror.example/simple",
        "extra-index-url": "https://a.example/simple https://b.example/simple",
        "trusted-host": "a.example",
    }
    monkeypatch.setenv("PIP_INDEX_URL", "https://pip.example/simple")  # pip's own name first
    assert _index.pip_config()["index-url"] == "https://pip.example/simple"


# ------------------------------------------- the client itself: PEP 691 JSON and file:// indexes

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


class _JsonIndex(http.server.SimpleHTTPRequestHandler):
    """A PEP 691 index: the project page only as JSON (there is no HTML page to fall back on);
    the server records the Accept header of each page request."""

    def do_GET(self):
        if self.path.rstrip("/") != "/simple/flash-attn":
            super().do_GET()  # the files
            return
        self.server.accepts.append(self.headers.get("Accept", ""))
        files = sorted(Path(self.directory, "files").iterdir())
        body = json.dumps(
            {
                "meta": {"api-version": "1.0"},
                "name": "flash-attn",
                "files": [
                    {
                        "filename": p.name,
                        "url": f"../../files/{p.name}",
                        "hashes": {"sha256": (Path(self.directory, "hashes") / p.name).read_text()},
                    }
                    for p in files
                ],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", JSON_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def json_index(tmp_path):
    root = tmp_path / "json-index"
    sdist = pack_sample(root / "files")
    pack_sample(root / "files", "0.2.0")
    (root / "files" / f"flash_attn-{SAMPLE_VERSION}-py3-none-any.whl").write_bytes(b"decoy")
    (root / "hashes").mkdir()
    for p in (root / "files").iterdir():
        (root / "hashes" / p.name).write_text(hashlib.sha256(p.read_bytes()).hexdigest())
    handler = functools.partial(_JsonIndex, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.accepts = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/simple"
    yield {"url": url, "sdist": sdist, "root": root, "accepts": server.accepts}
    server.shutdown()
    server.server_close()


def _only_index(monkeypatch, url: str) -> None:
    """pip configured for exactly this index, as a user would (no config file, PIP_INDEX_URL)."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", url)
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)


def test_a_pep_691_json_index_is_asked_for_json_and_its_sdist_downloaded(
    json_index, tmp_path, monkeypatch
):
    _only_index(monkeypatch, json_index["url"])
    url, sha = _index.find_sdist_url(json_index["url"], SAMPLE_VERSION, {})
    assert url.endswith(f"/files/flash_attn-{SAMPLE_VERSION}.tar.gz")  # not the wheel, not 0.2.0
    assert sha == hashlib.sha256(json_index["sdist"].read_bytes()).hexdigest()
    assert JSON_TYPE in json_index["accepts"][0]

    got = _index.download(SAMPLE_VERSION, tmp_path / "dest")
    assert got == tmp_path / "dest" / json_index["sdist"].name
    assert got.read_bytes() == json_index["sdist"].read_bytes()


def test_a_json_index_whose_hash_differs_from_the_bytes_is_refused(
    json_index, tmp_path, monkeypatch
):
    (json_index["root"] / "hashes" / json_index["sdist"].name).write_text("0" * 64)
    _only_index(monkeypatch, json_index["url"])
    with pytest.raises(FaShimError) as caught:
        _index.download(SAMPLE_VERSION, tmp_path / "dest")
    assert "the index's sha256 does not match the downloaded bytes" in caught.value.details
    assert not (tmp_path / "dest").exists() or not list((tmp_path / "dest").iterdir())


def test_a_file_url_simple_index_on_disk(tmp_path, monkeypatch):
    """index-url = file:///shared/simple: a PEP 503 tree of directories and index.html files."""
    root = tmp_path / "on-disk"
    sdist = pack_sample(root / "files")
    (root / "files" / f"flash_attn-{SAMPLE_VERSION}-py3-none-any.whl").write_bytes(b"decoy")
    _write_page(root)
    url = (root / "simple").as_uri()
    _only_index(monkeypatch, url)
    found, sha = _index.find_sdist_url(url, SAMPLE_VERSION, {})
    assert found == (root / "files" / sdist.name).as_uri()
    assert sha == hashlib.sha256(sdist.read_bytes()).hexdigest()
    got = _index.download(SAMPLE_VERSION, tmp_path / "dest", pinned_sha256=sha)
    assert got.read_bytes() == sdist.read_bytes()

    with pytest.raises(FaShimError) as caught:  # the pin is checked on file:// bytes too
        _index.download(SAMPLE_VERSION, tmp_path / "dest2", pinned_sha256="0" * 64)
    assert f"is not the upstream release's {'0' * 64}" in caught.value.details
    assert not (tmp_path / "dest2").exists()
