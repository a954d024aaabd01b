"""Provisioning NVIDIA's CUDA 13.0 compiler wheels (`cuda-toolkit` index): downloads the real
wheels once per session with pip, serves them from a PEP 503 index on loopback that counts what
it is asked, and assembles a real toolkit whose nvcc must run; an index without them, or with a
wrong hash, installs nothing. The decision itself: tests/unit/toolchain/test_toolkit.py and
tests/integration/test_toolkit_nvccs.py."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import stat
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest
from conftest import REPO, run

from fa_backend.core import _hostlock
from fa_backend.core._errors import FaShimError
from fa_backend.toolchain import _compilers, _toolkit

COMPONENTS = [f"{p}>=13.0,<13.1" for p in _toolkit.COMPONENTS]


@pytest.fixture(scope="session")
def cuda13_wheels(tmp_path_factory) -> Path:
    """NVIDIA's CUDA 13.0 compiler wheels (~120 MB), downloaded once with pip."""
    directory = tmp_path_factory.mktemp("cuda13-wheels")
    proc = run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", directory, *COMPONENTS],
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"the package index serves no CUDA 13.0 compiler wheels: {proc.stderr[-300:]}")
    return directory


class _Index(http.server.ThreadingHTTPServer):
    """A PEP 503 index of a wheel directory; `requests` lists every path asked for."""

    def __init__(self, wheels: Path, bad_hash: str | None = None) -> None:
        self.wheels, self.bad_hash, self.requests = wheels, bad_hash, []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/simple"


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        index: _Index = self.server
        index.requests.append(self.path)
        parts = urllib.parse.unquote(self.path).strip("/").split("/")
        if parts[0] == "simple" and len(parts) == 2:
            links = []
            for wheel in sorted(index.wheels.glob("*.whl")):
                if wheel.name.split("-")[0].replace("_", "-") == parts[1]:
                    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
                    if index.bad_hash and wheel.name.startswith(index.bad_hash):
                        digest = "0" * 64
                    href = f"/files/{urllib.parse.quote(wheel.name)}#sha256={digest}"
                    links.append(f'<a href="{href}">{wheel.name}</a>')
            body = ("<html><body>" + "\n".join(links) + "</body></html>").encode()
            self._send(200 if links else 404, body, "text/html")
        elif parts[0] == "files" and len(parts) == 2 and (index.wheels / parts[1]).is_file():
            self._send(200, (index.wheels / parts[1]).read_bytes(), "application/octet-stream")
        else:
            self._send(404, b"not found", "text/plain")

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _serve(monkeypatch, wheels: Path, bad_hash: str | None = None) -> _Index:
    server = _Index(wheels, bad_hash)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # only this index, as pip would see it
    monkeypatch.setenv("PIP_INDEX_URL", server.url)
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_FIND_LINKS"):
        monkeypatch.delenv(name, raising=False)
    return server


@pytest.mark.slow
def _doctor(python: Path, cache: Path) -> str:
    env = {**os.environ, "FA_SHIM_CUDA_TOOLKIT": "index", "FA_SHIM_CACHE_DIR": str(cache)}
    proc = subprocess.run(
        [sys.executable, "-m", "fa_backend", "doctor", "--python", python],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
    )
    return " ".join(proc.stdout.split())


@pytest.mark.slow
def test_index_provisions_a_working_toolkit_then_reuses_it_without_a_request(
    cuda13_wheels, torch211_python, monkeypatch, tmp_path
):
    server = _serve(monkeypatch, cuda13_wheels)
    # doctor says what a build would do, and downloads nothing
    cache = tmp_path / "cache"
    assert (
        f"* a build would provision CUDA 13.0 from the package index into {cache}/toolkits/13.0"
        in _doctor(torch211_python, cache)
    )
    assert server.requests == [] and not (cache / "toolkits").exists()
    old = os.umask(0o022)
    try:
        root = _toolkit.provision(tmp_path / "cache", "13.0")
    finally:
        os.umask(old)
        server.shutdown()
    assert root == tmp_path / "cache" / "toolkits" / "13.0"
    pages = [p for p in server.requests if p.startswith("/simple/")]
    files = [p for p in server.requests if p.startswith("/files/")]
    assert len(pages) == len(files) == len(_toolkit.COMPONENTS)
    # a CUDA_HOME layout nvcc and torch's cpp_extension accept
    version = run([root / "bin" / "nvcc", "--version"]).stdout
    assert "release 13.0" in version
    for tool in ("nvcc", "cudafe++", "ptxas", "nvlink", "fatbinary"):
        assert os.access(root / "bin" / tool, os.X_OK), tool
    assert os.access(root / "nvvm" / "bin" / "cicc", os.X_OK)
    assert (root / "include" / "cuda_runtime.h").is_file()
    assert (root / "include" / "crt" / "host_config.h").is_file()
    assert (root / "include" / "cccl" / "cuda" / "std" / "type_traits").is_file()
    assert (root / "lib64").resolve() == (root / "lib").resolve()
    assert (root / "lib" / "libcudart.so").resolve().name == "libcudart.so.13"
    assert _compilers.nvcc_home(root / "bin" / "nvcc") == root.resolve()
    # readable and usable by other users (umask 022)
    for path in (root, root / "bin" / "nvcc", root / "include" / "cuda_runtime.h"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o044 == 0o044 and mode & 0o022 == 0, (path, oct(mode))
    assert stat.S_IMODE((root / "bin" / "nvcc").stat().st_mode) & 0o001
    manifest = _toolkit.installed(tmp_path / "cache", "13.0")
    assert manifest["nvcc"].startswith("13.0.")
    assert [w["project"] for w in manifest["wheels"]] == list(_toolkit.COMPONENTS)
    assert all(len(w["sha256"]) == 64 for w in manifest["wheels"])
    assert not list(root.parent.glob("*.part"))

    # a later build: the toolkit is found, the index is not asked anything
    requests = len(server.requests)
    assert _toolkit.provision(tmp_path / "cache", "13.0") == root
    assert len(server.requests) == requests
    # nvcc compiles and links a CUDA program with it
    (tmp_path / "k.cu").write_text(
        "#include <cuda/std/type_traits>\n#include <cstdio>\n"
        "__global__ void k(int* x) { *x = cuda::std::is_same_v<int, int>; }\n"
        'int main() { int* d; cudaMalloc(&d, 4); k<<<1, 1>>>(d); printf("ok\\n"); }\n'
    )
    run(
        [root / "bin" / "nvcc", "-arch=sm_80", "-o", tmp_path / "k", tmp_path / "k.cu"],
        env={**os.environ, "PATH": "/usr/bin:/bin"},
    )
    assert (tmp_path / "k").is_file()
    # doctor names the provisioned nvcc
    assert (
        f"* {root}/bin/nvcc CUDA 13.0 (from cuda-toolkit from the package index) "
        "<- a build would use this" in _doctor(torch211_python, cache)
    )


@pytest.mark.slow
def test_a_download_that_fails_the_index_hash_installs_nothing(
    cuda13_wheels, monkeypatch, tmp_path
):
    server = _serve(monkeypatch, cuda13_wheels, bad_hash="nvidia_cuda_crt")
    killed = tmp_path / "cache" / "toolkits" / ".13.0-killed.part" / "bin"  # a killed run's
    killed.mkdir(parents=True)
    try:
        with pytest.raises(FaShimError) as raised:
            _toolkit.provision(tmp_path / "cache", "13.0")
    finally:
        server.shutdown()
    assert "nvidia_cuda_crt-13.0." in raised.value.cause
    assert "the index lists 0000" in raised.value.cause
    toolkits = tmp_path / "cache" / "toolkits"
    assert list(toolkits.iterdir()) == []  # no toolkit, no .part, no lock
    assert not killed.parent.exists()


def test_no_compiler_wheel_on_the_index_names_the_index(monkeypatch, tmp_path, capfd):
    """An index without NVIDIA's wheels (a loopback index with nothing on it), asked after the
    toolkit lock of a build killed on this machine is taken over (_hostlock)."""
    server = _serve(monkeypatch, tmp_path)  # an empty wheel directory
    killed = subprocess.Popen(["true"])
    killed.wait()
    toolkits = tmp_path / "cache" / "toolkits"
    toolkits.mkdir(parents=True)
    holder = {"host": "here", "pid": killed.pid, "started": 0, **_hostlock.this_kernel()}
    (toolkits / ".13.0.lock").write_text(json.dumps(holder))
    try:
        with pytest.raises(FaShimError) as raised:
            _toolkit.provision(tmp_path / "cache", "13.0")
    finally:
        server.shutdown()
    assert "the package index has no nvidia-cuda-nvcc 13.0.* wheel" in raised.value.cause
    assert server.url in raised.value.details
    assert not _toolkit.installed(tmp_path / "cache", "13.0")
    assert "took over the CUDA toolkit lock" in capfd.readouterr().err
    assert list(toolkits.iterdir()) == []  # released: no lock left
