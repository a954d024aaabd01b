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

from fa_backend import _index


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
