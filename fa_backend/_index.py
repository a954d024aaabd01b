"""Download an sdist from the package index the user's pip is configured for.

`pip download` cannot be used: for an sdist it prepares metadata, i.e. runs flash-attn's setup.py,
which imports torch (pypa/pip#1884). So we read pip's own merged configuration (`pip config list`:
files and PIP_* variables) and speak the simple repository API (PEP 691 JSON, PEP 503 HTML).
Only sdists are ever considered.
"""

from __future__ import annotations

import contextlib
import hashlib
import html.parser
import json
import os
import shlex
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import Version

from . import _atomic, _log
from ._errors import FaShimError

PYPI = "https://pypi.org/simple"
_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


def pip_config() -> dict[str, str]:
    """pip's merged configuration, as pip itself resolves it (later entries win)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # see past build isolation
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    rank = {"global": 1, "download": 2, "install": 2, ":env:": 3}
    config: dict[str, str] = {}
    ranks: dict[str, int] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        section, _, name = key.rpartition(".")
        if not sep or rank.get(section, 0) < ranks.get(name, 0):
            continue
        with contextlib.suppress(ValueError):
            value = shlex.split(value)[0] if value.strip() else ""
        config[name], ranks[name] = value, rank.get(section, 0)
    return config


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)


def _opener(config: dict[str, str], url: str) -> urllib.request.OpenerDirector:
    host = urllib.parse.urlsplit(url).hostname or ""
    trusted = config.get("trusted-host", "").split()
    if host in trusted:
        context = ssl._create_unverified_context()
    else:
        context = ssl.create_default_context(cafile=config.get("cert") or None)
    if config.get("client-cert"):
        context.load_cert_chain(config["client-cert"])
    handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPSHandler(context=context)]
    if config.get("proxy"):
        handlers.append(
            urllib.request.ProxyHandler({"http": config["proxy"], "https": config["proxy"]})
        )
    return urllib.request.build_opener(*handlers)


def _read(url: str, config: dict[str, str], accept: str | None = None) -> tuple[bytes, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        path = Path(urllib.request.url2pathname(parts.path))
        if path.is_dir():
            path = path / "index.html"
        return path.read_bytes(), "text/html"
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    timeout = float(config.get("timeout") or config.get("default-timeout") or 60)
    with _opener(config, url).open(request, timeout=timeout) as response:
        return response.read(), response.headers.get("Content-Type", "")


def find_sdist_url(index: str, version: str, config: dict[str, str]) -> tuple[str, str | None]:
    """(url, sha256 or None) of the flash-attn sdist of that version on one index."""
    page = index.rstrip("/") + "/flash-attn/"
    body, ctype = _read(page, config, _ACCEPT)
    entries: list[tuple[str, str | None]] = []
    if "json" in ctype:
        for item in json.loads(body)["files"]:
            entries.append(
                (urllib.parse.urljoin(page, item["url"]), item.get("hashes", {}).get("sha256"))
            )
    else:
        parser = _Links()
        parser.feed(body.decode("utf-8", "replace"))
        for href in parser.links:
            url, _, fragment = urllib.parse.urljoin(page, href).partition("#")
            sha = fragment.split("=", 1)[1] if fragment.startswith("sha256=") else None
            entries.append((url, sha))
    for url, sha in entries:
        filename = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        try:
            name, found = parse_sdist_filename(filename)
        except InvalidSdistFilename:
            continue  # wheels and anything else are never taken
        if (
            name == canonicalize_name("flash-attn")
            and found == Version(version)
            and filename.endswith(".tar.gz")
        ):
            return url, sha
    raise LookupError(f"{page} lists no sdist of flash-attn {version}")


def download(version: str, dest_dir: Path) -> Path:
    """Fetch the sdist into dest_dir atomically; return its path."""
    config = pip_config()
    indexes = [config.get("index-url") or PYPI, *config.get("extra-index-url", "").split()]
    if config.get("no-index", "").lower() in ("1", "true", "yes"):
        indexes = []
    failures = []
    for index in indexes:
        try:
            url, sha = find_sdist_url(index, version, config)
            _log.info(f"downloading {url}")
            body, _ = _read(url, config)
        except (OSError, LookupError, ValueError, urllib.error.URLError) as exc:
            failures.append(f"{index}: {getattr(exc, 'reason', exc)}")
            continue
        if sha and hashlib.sha256(body).hexdigest() != sha:
            failures.append(f"{url}: the index's sha256 does not match the downloaded bytes")
            continue
        return _atomic.write(dest_dir / urllib.parse.unquote(url.rsplit("/", 1)[-1]), body)
    raise FaShimError(
        f"could not download the flash-attn {version} sdist (offline, or not on the index).",
        details="tried:\n" + "\n".join(failures or ["no index configured (pip no-index)"]),
        fix=f"put flash_attn-{version}.tar.gz in a directory and pass -C sdist-dir=DIR "
        "(or -C sdist=FILE), "
        "or fix the index/proxy/cert settings in your pip configuration.",
    )
