"""The network seal around upstream's setup.py: a sample setup.py tries every way out (curl,
wget, a child python's urlopen, a UDP datagram, a name lookup, a ctypes connect, in-process
Python) against listeners on this machine's loopback. The fallback's proxy in-process:
tests/unit/pipeline/test_seal.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

import pytest
from conftest import PY, REPO, pip_wheel_cmd, run, sample_settings

from fa_backend.pipeline import _seal

NAMESPACE_HERE = _seal.choose().kind == _seal.NAMESPACE
needs_namespace = pytest.mark.skipif(
    not NAMESPACE_HERE, reason=f"no network namespace can be made here: {_seal.choose().why}"
)
CHILD_PATHS = {
    "subprocess curl",
    "os.system wget",
    "child python urlopen",
    "child python udp sendto",
    "child python getaddrinfo",
    "ctypes connect",
}


class Listeners:
    """A TCP and a UDP listener on 127.0.0.1 that record whatever reaches them."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        for target in (self._serve_tcp, self._serve_udp):
            threading.Thread(target=target, daemon=True).start()

    def _serve_tcp(self) -> None:
        while True:
            try:
                conn, _ = self.tcp.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    first = conn.recv(200).decode(errors="replace").splitlines()
                    self.seen.append(f"tcp {first[0] if first else ''}")
                    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    self.seen.append("tcp (no data)")

    def _serve_udp(self) -> None:
        while True:
            try:
                data, _ = self.udp.recvfrom(200)
            except OSError:
                return
            self.seen.append(f"udp {data.decode(errors='replace')}")

    def spec(self, report: Path, *flags: str) -> str:
        ports = [self.tcp.getsockname()[1], self.udp.getsockname()[1]]
        return ":".join([*map(str, ports), str(report), *flags])

    def close(self) -> None:
        self.tcp.close()
        self.udp.close()


@pytest.fixture
def listeners():
    listening = Listeners()
    yield listening
    listening.close()


def attempts(report: Path) -> dict[str, dict]:
    return {r["path"]: r for r in map(json.loads, report.read_text().splitlines())}


@pytest.mark.slow
@needs_namespace
def test_in_the_namespace_nothing_reaches_the_listener_and_the_build_goes_on(
    host_venv, sample_sdist_dir, tmp_path, listeners
):
    report, out = tmp_path / "attempts.jsonl", tmp_path / "wheels"
    env = {**os.environ, "SAMPLE_NETWORK_PROBE": listeners.spec(report)}
    # upstream FA2's setup_requires, with no pip index answering: setuptools fetched them through
    # pip inside the seal (five retries, then a failed build); the driver leaves them out
    env |= {"SAMPLE_SETUP_REQUIRES": "packaging psutil ninja", "PIP_CONFIG_FILE": os.devnull}
    env |= {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0"}
    proc = run(pip_wheel_cmd(host_venv, out, "-v", *sample_settings(sample_sdist_dir)), env=env)
    assert listeners.seen == []
    tried = attempts(report)
    assert set(tried) == CHILD_PATHS
    # a datagram is "sent" into the namespace's own loopback: the listener is the judge there
    assert not [p for p, r in tried.items() if r["reached"] and "udp" not in p], tried
    assert "name resolution" in tried["child python getaddrinfo"]["detail"]
    # children that fail to reach the network are like an offline machine: the build goes on
    assert "network seal: network namespace" in proc.stderr
    # the seal in force is a fact of this host: the wheel-cache entry records it, the wheel's
    # bytes do not depend on it (pipeline/_reproducible)
    (record,) = (tmp_path / "xdg-cache" / "fa-shim" / "wheels").glob("*/entry.json")
    assert json.loads(record.read_text())["built"]["network_seal"] == "network namespace"
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith("fa_shim_provenance.json"))
        assert "network_seal" not in json.loads(zf.read(name))


@pytest.mark.slow
def test_on_the_fallback_seal_the_build_fails_naming_the_network(
    host_venv, sample_sdist_dir, tmp_path, listeners
):
    report, out = tmp_path / "attempts.jsonl", tmp_path / "wheels"
    env = {
        **os.environ,
        _seal.FORCE_ENV: "proxy",
        "SAMPLE_NETWORK_PROBE": listeners.spec(report, "inprocess"),
    }
    proc = run(
        pip_wheel_cmd(host_venv, out, *sample_settings(sample_sdist_dir)), env=env, check=False
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "upstream's build tried to reach the network (sendto ('127.0.0.1'" in text
    assert "network seal: proxy to a closed port" in text
    # the audit hook ended the build before upstream's own datagram was sent
    assert attempts(report)["in-process udp sendto"]["reached"] is None
    assert not [s for s in listeners.seen if "udp-inproc" in s]
    # what honours the proxy variables was turned away; native sockets are not (README says so)
    assert not [s for s in listeners.seen if any(w in s for w in ("curl", "wget", "urllib"))]
    assert not out.exists() or not list(out.iterdir())


SEALED_CHILD = """
import os, socket, subprocess, sys, types
sys.modules["fa_backend"] = types.ModuleType("fa_backend")
sys.modules["fa_backend"].__path__ = [os.path.join(sys.argv[1], "fa_backend")]
from fa_backend.pipeline import _seal
print(_seal.choose().kind, _seal.choose().prefix, file=sys.stderr)
code = (
    "import os, socket, sys; open(sys.argv[1], 'w').write(str(os.getuid()));"
    "s = socket.socket(); s.settimeout(5)\\n"
    "try: s.connect(('127.0.0.1', int(sys.argv[2]))); print('connected')\\n"
    "except OSError as e: print('refused', e)"
)
child = [sys.executable, "-c", code, sys.argv[2], sys.argv[3]]
with _seal.sealed(child, dict(os.environ)) as (cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True).stdout
    if len(sys.argv) > 4:  # and the CUDA compiler works in there
        nvcc = [*cmd[: len(_seal.choose().prefix)], *sys.argv[4:]]
        out += str(subprocess.run(nvcc, env=env).returncode)
print(out)
"""


@needs_namespace
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a second, ordinary user")
def test_an_ordinary_user_gets_a_user_namespace_and_keeps_owning_its_files(listeners):
    nobody = 65534
    tmp_path = Path(tempfile.mkdtemp(prefix="fa-shim-seal-"))  # pytest's tmp is root's only
    tmp_path.chmod(0o777)
    written = tmp_path / "written-in-the-namespace"
    command = [sys.executable, "-c", SEALED_CHILD, REPO, written, listeners.tcp.getsockname()[1]]
    nvcc = shutil.which("nvcc")
    if nvcc:
        (tmp_path / "k.cu").write_text("__global__ void k(float *x) { x[0] = 1; }\n")
        command += [nvcc, "-c", tmp_path / "k.cu", "-o", tmp_path / "k.o"]
    python = "/usr/bin/python3"  # the test interpreter may live where user nobody cannot go
    if not os.access(python, os.X_OK):
        pytest.skip("no /usr/bin/python3 for the second user")
    command[0] = python
    proc = run(
        ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups", *command],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
    )
    assert "--map-root-user" in proc.stderr  # chosen for a user that is not root
    assert written.read_text() == "0"  # mapped root inside ...
    assert written.stat().st_uid == nobody  # ... but the file is the invoking user's
    assert proc.stdout.startswith("refused") and listeners.seen == []
    if nvcc:
        assert proc.stdout.strip().endswith("0") and (tmp_path / "k.o").stat().st_uid == nobody
    shutil.rmtree(tmp_path)


def test_doctor_names_the_seal_in_force():
    env = {**os.environ, "PYTHONPATH": str(REPO), _seal.FORCE_ENV: "proxy"}
    proc = run([PY, "-m", "fa_backend", "doctor", "--json"], check=False, env=env)
    seal = json.loads(proc.stdout)["seal"]
    assert seal["kind"] == _seal.PROXY and seal["why"] == f"{_seal.FORCE_ENV}=proxy"
    proc = run([PY, "-m", "fa_backend", "doctor"], check=False, cwd=REPO)
    assert f"seal        {_seal.choose().kind}" in proc.stdout
