"""The wheel cache's lock across hosts: builders on two "hosts" sharing a cache directory.

Each builder runs in namespaces of its own (`unshare --uts --pid`): its own host name, its own
process ids (both see themselves as low pids, so no pid means anything to the other). The lock
is fa-shim's lock file with a heartbeat (fa_backend/fleet/_hostlock.py), no kernel lock: one builder
compiles, the other waits and reuses; a killed builder's lock is taken over once its heartbeat
stops; and nobody waits past the timeout, which names the holder.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PY, pip_wheel_cmd, run, sample_settings, slow_cxx

pytestmark = pytest.mark.slow


def _unshare() -> list[str]:
    exe = shutil.which("unshare")
    if not exe:
        pytest.skip("unshare (util-linux) is not installed")
    cmd = [exe, "--uts", "--pid", "--fork", "--kill-child"]
    if os.geteuid() != 0:
        cmd.insert(1, "--map-root-user")
    probe = subprocess.run(
        [*cmd, "sh", "-c", "hostname fa-probe && hostname"], capture_output=True, text=True
    )
    if probe.returncode != 0 or probe.stdout.strip() != "fa-probe":
        pytest.skip(f"cannot make UTS+PID namespaces here: {probe.stderr.strip()}")
    return cmd


def _on_host(host: str, argv: list) -> list[str]:
    """argv run as pid 1's child in a PID namespace of its own, on a host named `host`."""
    quoted = " ".join("'" + str(a).replace("'", "'\\''") + "'" for a in argv)
    return [*_unshare(), "sh", "-c", f"hostname {host} && exec {quoted}"]


def _host_env(host: str, out: Path, env: dict) -> dict:
    """Each host's own TMPDIR, beside its output: a killed builder's scratch stays there (no
    other host may remove it), not in the /tmp that outlives the test."""
    tmp = out.parent / f"{host}-tmp"
    tmp.mkdir(exist_ok=True)
    return {**os.environ, **env, "TMPDIR": str(tmp)}


def _builder(host: str, out: Path, sdists: Path, cache: Path, *extra: str, env=None):
    cmd = pip_wheel_cmd(
        PY, out, "-v", *sample_settings(sdists), "-C", f"wheel-cache-dir={cache}", *extra
    )
    return subprocess.Popen(
        _on_host(host, cmd),
        env=_host_env(host, out, env or {}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _wait_for_lock(cache: Path, seconds: float = 300) -> Path:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        locks = list((cache / ".locks").glob("*.lock")) if (cache / ".locks").is_dir() else []
        if locks:
            return locks[0]
        time.sleep(0.2)
    raise AssertionError("no builder took the lock")


def test_one_host_compiles_the_other_waits_and_reuses(sample_sdist_dir, tmp_path):
    cache = tmp_path / "shared-wheels"
    # node-a stays inside its lock a while: its compiles (not its --version probes) are slow
    env = slow_cxx(tmp_path, 'case "$*" in *" -c "*) sleep 8;; esac')
    a = _builder("node-a", tmp_path / "a", sample_sdist_dir, cache, env=env)
    lock = _wait_for_lock(cache)
    assert '"host": "node-a"' in lock.read_text()
    b = _builder("node-b", tmp_path / "b", sample_sdist_dir, cache, env=env)
    out_a, out_b = a.communicate(timeout=900)[0], b.communicate(timeout=900)[0]
    assert (a.returncode, b.returncode) == (0, 0), out_a + out_b
    assert "running upstream setup.py (wheel)" in out_a
    assert "another build of the same wheel holds" in out_b and "host node-a, pid " in out_b
    assert "wheel cache hit" in out_b
    assert "running upstream setup.py" not in out_b
    (wa,), (wb,) = (tmp_path / "a").glob("*.whl"), (tmp_path / "b").glob("*.whl")
    assert wa.read_bytes() == wb.read_bytes()
    assert not list((cache / ".locks").iterdir())  # released


def test_a_killed_builders_lock_is_taken_over_after_its_heartbeat_stops(sample_sdist_dir, tmp_path):
    cache = tmp_path / "shared-wheels"
    beat = ("-C", "wheel-cache-heartbeat=0.5")  # stale after 8 beats: 4 s
    # the same compiler on both hosts (it is part of the fingerprint): it hangs while `hang` exists
    flag = tmp_path / "hang"
    flag.touch()
    hang = slow_cxx(tmp_path, f'[ -e {flag} ] && case "$*" in *" -c "*) sleep 600;; esac')
    a = _builder("node-a", tmp_path / "a", sample_sdist_dir, cache, *beat, env=hang)
    lock = _wait_for_lock(cache)
    time.sleep(2)
    before = lock.stat().st_mtime_ns
    time.sleep(1.5)
    assert lock.stat().st_mtime_ns != before, "the holder's heartbeat does not refresh the lock"
    os.killpg(a.pid, signal.SIGKILL)  # the whole namespace: pip, fa-shim, the compiler
    a.wait()
    assert lock.exists()  # a dead builder cannot clean up
    flag.unlink()
    started = time.monotonic()
    b = run(
        _on_host(
            "node-b",
            pip_wheel_cmd(
                PY,
                tmp_path / "b",
                "-v",
                *sample_settings(sample_sdist_dir),
                "-C",
                f"wheel-cache-dir={cache}",
                *beat,
            ),
        ),
        env=_host_env("node-b", tmp_path / "b", hang),  # node-a's fingerprint
    )
    print(f"\nnode-b took over and built in {time.monotonic() - started:.0f} s")
    assert "another build of the same wheel holds" in b.stderr and "host node-a" in b.stderr
    assert "took over the wheel-cache lock" in b.stderr
    assert "running upstream setup.py (wheel)" in b.stderr
    assert len(list((tmp_path / "b").glob("*.whl"))) == 1
    assert not [p for p in (cache / ".locks").iterdir()]  # neither the dead lock nor ours


def test_a_waiter_gives_up_after_the_timeout_naming_the_holder(sample_sdist_dir, tmp_path):
    cache = tmp_path / "shared-wheels"
    hang = slow_cxx(tmp_path, 'case "$*" in *" -c "*) sleep 600;; esac')
    a = _builder("node-a", tmp_path / "a", sample_sdist_dir, cache, env=hang)
    try:
        _wait_for_lock(cache)
        b = run(
            _on_host(
                "node-b",
                pip_wheel_cmd(
                    PY,
                    tmp_path / "b",
                    "-v",
                    *sample_settings(sample_sdist_dir),
                    "-C",
                    f"wheel-cache-dir={cache}",
                    "-C",
                    "wheel-cache-lock-timeout=3",
                ),
            ),
            env=_host_env("node-b", tmp_path / "b", hang),  # node-a's fingerprint
            check=False,
        )
    finally:
        os.killpg(a.pid, signal.SIGKILL)
        a.wait()
    assert b.returncode != 0
    out = b.stdout + b.stderr
    assert "fa-shim: error: waited 3 s for the wheel-cache lock" in out
    assert "held by another build of the same wheel (host node-a, pid " in out
    assert ", since 20" in out  # the holder's start time
    assert "-C wheel-cache-lock-timeout" in out
