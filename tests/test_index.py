"""The sdist download path, against a real HTTP package index on loopback, configured the way
users configure pip (PIP_INDEX_URL / pip.conf): only the sdist is ever taken, and it is cached."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import threading
from pathlib import Path

import pytest
from conftest import PY, REPO, SAMPLE_VERSION, pack_sample, run


@pytest.fixture
def index(tmp_path):
    """A PEP 503 simple index serving the sample sdist, a decoy wheel and another version."""
    root = tmp_path / "index"
    files = root / "files"
    sdist = pack_sample(files)
    pack_sample(files, "0.2.0")
    (files / f"flash_attn-{SAMPLE_VERSION}-cp311-cp311-linux_x86_64.whl").write_bytes(b"decoy")
    page = root / "simple" / "flash-attn"
    page.mkdir(parents=True)
    links = "".join(
        f'<a href="../../files/{p.name}#sha256={hashlib.sha256(p.read_bytes()).hexdigest()}">'
        f"{p.name}</a>\n"
        for p in sorted(files.iterdir())
    )
    (page / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"url": f"http://127.0.0.1:{server.server_port}/simple", "sdist": sdist, "root": root}
    server.shutdown()


def _run_prepare(tmp_path: Path, index_url: str, name: str, check: bool = True):
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
        f"flash-attn-version={SAMPLE_VERSION}",
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
