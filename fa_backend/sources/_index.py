"""Download an sdist from the index the user's pip is configured for (pip's configuration, else
PIP_* and uv's variables; PEP 691/503), not by `pip download`, which runs setup.py (pypa/pip#1884).
Credentials in an index URL go to that host only, as basic auth, and are never printed."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html.parser
import http.client
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

from ..core import _atomic, _log
from ..core._errors import FaShimError

PYPI = "https://pypi.org/simple"
_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


def pip_config() -> dict[str, str]:
    """pip's merged configuration, as pip itself resolves it (later entries win)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # see past build isolation
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return _environment_config()
    if proc.returncode != 0:  # no pip in this environment (uv's venvs)
        return _environment_config()
    rank = {"global": 1, "download": 2, "install": 2, ":env:": 3}
    config: dict[str, str] = {}
    ranks: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition("=")
        section, _, name = key.rpartition(".")
        if not sep or rank.get(section, 0) < ranks.get(name, 0):
            continue
        with contextlib.suppress(ValueError):
            value = shlex.split(value)[0] if value.strip() else ""
        config[name], ranks[name] = value, rank.get(section, 0)
    return config


# uv's index variables, for environments without pip (what uv itself would use)
_UV = {
    "index-url": ("UV_DEFAULT_INDEX", "UV_INDEX_URL"),
    "extra-index-url": ("UV_INDEX", "UV_EXTRA_INDEX_URL"),
}


def _environment_config() -> dict[str, str]:
    """PIP_* variables as pip maps them (PIP_INDEX_URL -> index-url), then uv's index ones."""
    config = {
        key[4:].lower().replace("_", "-"): value
        for key, value in os.environ.items()
        if key.startswith("PIP_") and key != "PIP_CONFIG_FILE"
    }
    for name, variables in _UV.items():
        entries = " ".join(os.environ.get(v, "") for v in variables).split()
        if entries and not config.get(name):
            # UV_INDEX entries may be named: "name=https://..."
            urls = [e.split("=", 1)[1] if "=" in e.split("://")[0] else e for e in entries]
            config[name] = urls[0] if name == "index-url" else " ".join(urls)
    if os.environ.get("UV_NO_INDEX") or os.environ.get("UV_OFFLINE"):
        config.setdefault("no-index", "true")
    return config


def redact(url: str) -> str:
    """The URL as it may be printed: user:****@host, as pip shows it."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:****@{parts.netloc.rpartition('@')[2]}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _split_auth(url: str) -> tuple[str, tuple[str, str] | None]:
    """(url without user:password@, the credentials or None)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, None
    plain = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    user, password = (urllib.parse.unquote(x or "") for x in (parts.username, parts.password))
    return plain, (user, password)


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.links.append(href)


def _opener(config: dict[str, str], url: str) -> urllib.request.OpenerDirector:
    if urllib.parse.urlsplit(url).hostname in config.get("trusted-host", "").split():
        context = ssl._create_unverified_context()
    else:
        context = ssl.create_default_context(cafile=config.get("cert") or None)
    if config.get("client-cert"):
        context.load_cert_chain(config["client-cert"])
    handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPSHandler(context=context)]
    if proxy := config.get("proxy"):
        handlers.append(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
    return urllib.request.build_opener(*handlers)


def _read(
    url: str,
    config: dict[str, str],
    accept: str | None = None,
    auth: dict[str, tuple[str, str]] | None = None,
) -> tuple[bytes, str]:
    """Fetch url; credentials go to the host they were given for (url's own, else `auth`)."""
    url, own = _split_auth(url)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        path = Path(urllib.request.url2pathname(parts.path))
        if path.is_dir():
            path = path / "index.html"
        return path.read_bytes(), "text/html"
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    credentials = own or (auth or {}).get(parts.netloc)
    if credentials:  # unredirected: a redirect to another host does not get it
        token = base64.b64encode(":".join(credentials).encode()).decode()
        request.add_unredirected_header("Authorization", f"Basic {token}")
    timeout = float(config.get("timeout") or config.get("default-timeout") or 60)
    with _opener(config, url).open(request, timeout=timeout) as response:
        return response.read(), response.headers.get("Content-Type", "")


def project_files(
    index: str, project: str, config: dict[str, str], auth: dict[str, tuple[str, str]] | None = None
) -> list[tuple[str, str | None]]:
    """(url, sha256 or None) of every file the index lists for a project (PEP 691 or 503)."""
    page = index.rstrip("/") + f"/{canonicalize_name(project)}/"
    body, ctype = _read(page, config, _ACCEPT, auth)
    if "json" in ctype:
        return [
            (urllib.parse.urljoin(page, item["url"]), item.get("hashes", {}).get("sha256"))
            for item in json.loads(body)["files"]
        ]
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    entries: list[tuple[str, str | None]] = []
    for href in parser.links:
        url, _, fragment = urllib.parse.urljoin(page, href).partition("#")
        sha = fragment.split("=", 1)[1] if fragment.startswith("sha256=") else None
        entries.append((url, sha))
    return entries


def find_sdist_url(
    index: str, version: str, config: dict[str, str], auth: dict[str, tuple[str, str]] | None = None
) -> tuple[str, str | None]:
    """(url, sha256 or None) of the flash-attn sdist of that version on one index."""
    for url, sha in project_files(index, "flash-attn", config, auth):
        filename = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        try:
            name, found = parse_sdist_filename(filename)
        except InvalidSdistFilename:
            continue  # wheels and anything else are never taken
        if (name, found) == ("flash-attn", Version(version)) and filename.endswith(".tar.gz"):
            return url, sha  # parse_sdist_filename canonicalizes the name
    page = index.rstrip("/") + "/flash-attn/"
    raise LookupError(f"{redact(page)} lists no sdist of flash-attn {version}")


def indexes(config: dict[str, str]) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """The indexes pip would ask, in order, and the credentials given for each host."""
    found = [config.get("index-url") or PYPI, *config.get("extra-index-url", "").split()]
    if config.get("no-index", "").lower() in ("1", "true", "yes"):
        found = []
    auth = {}
    for index in found:
        plain, credentials = _split_auth(index)
        if credentials:
            auth[urllib.parse.urlsplit(plain).netloc] = credentials
    return found, auth


# what a failed request to an index raises
FETCH_ERRORS = (
    OSError,
    LookupError,
    ValueError,
    urllib.error.URLError,
    http.client.HTTPException,  # a connection cut mid-body (IncompleteRead)
)


def fetch(url: str, config: dict[str, str], auth: dict[str, tuple[str, str]]) -> bytes:
    """A file the index listed, with the credentials of its host (raises FETCH_ERRORS)."""
    return _read(url, config, auth=auth)[0]


def download(version: str, dest_dir: Path, pinned_sha256: str | None = None) -> Path:
    """Fetch the sdist into dest_dir atomically; return its path. Bytes that fail the index's
    or fa-shim's pinned hash are never written (a bad mirror would poison the cache)."""
    config = pip_config()
    urls, auth = indexes(config)
    failures = []
    for index in urls:
        try:
            url, sha = find_sdist_url(index, version, config, auth)
            _log.info(f"downloading {redact(url)}")
            body = fetch(url, config, auth)
        except FETCH_ERRORS as exc:
            failures.append(f"{redact(index)}: {getattr(exc, 'reason', exc)}")
            continue
        digest = hashlib.sha256(body).hexdigest()
        if sha and digest != sha:
            failures.append(
                f"{redact(url)}: the index's sha256 does not match the downloaded bytes"
            )
            continue
        if pinned_sha256 and digest != pinned_sha256:
            failures.append(
                f"{redact(url)}: sha256 {digest} is not the upstream release's "
                f"{pinned_sha256} (a mirror serving other bytes?)"
            )
            continue
        return _atomic.write(dest_dir / urllib.parse.unquote(url.rsplit("/", 1)[-1]), body)
    raise FaShimError(
        f"could not download the flash-attn {version} sdist (offline, or not on the index).",
        details="tried:\n" + "\n".join(failures or ["no index configured (pip no-index)"]),
        fix=f"put flash_attn-{version}.tar.gz in a directory and pass -C sdist-dir=DIR "
        "(or -C sdist=FILE), "
        "or fix the index/proxy/cert settings in your pip configuration.",
    )
