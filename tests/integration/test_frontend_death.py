"""A build dies with its frontend. pip builds the sample with a compiler that hangs; then its
process group gets SIGTERM (a CI cancel, a scheduler's timeout), or pip alone gets SIGKILL.
Within seconds no process of the build is left (driver, ninja, launcher, compiler: the upstream
child runs in a session of its own, out of reach of the frontend's signals), the scratch and
the wheel-cache lock are gone, nothing was published, and the next builder does not wait."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PY, pip_wheel_cmd, sample_settings

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


def _processes_mentioning(text: str) -> list[str]:
    """Live processes whose command line names `text` (the test's own directory)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, UnicodeDecodeError):
            continue
        if text in cmdline and state not in ("Z", "X") and int(pid) != os.getpid():
            found.append(f"{pid}: {cmdline[:200]}")
    return found


def _until(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def _setup(tmp_path: Path, sdists: Path) -> tuple[dict, list, Path, Path]:
    flag, started = tmp_path / "hang", tmp_path / "compiler-started"
    flag.touch()
    cxx = tmp_path / "cxx"  # hangs on a compile while `hang` exists, as a long nvcc does
    cxx.write_text(
        f'#!/bin/sh\ncase "$*" in *flash_api.cpp*) if [ -e {flag} ]; then '
        f'echo $$ > {started}; sleep 600; fi;; esac\nexec g++ "$@"\n'
    )
    cxx.chmod(0o755)
    (tmp_path / "tmp").mkdir()
    env = {
        **os.environ,
        "CXX": str(cxx),
        "TMPDIR": str(tmp_path / "tmp"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "FA_SHIM_COMPILER_CACHE": "none",
    }
    cache = tmp_path / "wheels"
    args = [*sample_settings(sdists), "-C", f"wheel-cache-dir={cache}", "-v"]
    return env, args, cache, started


@pytest.mark.parametrize("kill", ["TERM the group", "KILL pip"])
def test_killing_the_frontend_ends_the_build_and_frees_the_lock(kill, tmp_path, sample_sdist_dir):
    env, args, cache, started = _setup(tmp_path, sample_sdist_dir)
    pip = subprocess.Popen(
        pip_wheel_cmd(PY, tmp_path / "out", *args),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # pip leads a process group, as in a CI job's shell
    )
    try:
        assert _until(started.is_file, 300), pip.stderr.read() if pip.poll() is not None else ""
        compiler = int(started.read_text())
        assert list((cache / ".locks").glob("*.lock")), "the build holds no wheel-cache lock"
        if kill == "TERM the group":
            os.killpg(pip.pid, signal.SIGTERM)
        else:
            os.kill(pip.pid, signal.SIGKILL)
        pip.wait(timeout=60)
        mark = str(tmp_path)
        assert _until(lambda: not _processes_mentioning(mark), 15), _processes_mentioning(mark)
        assert not Path(f"/proc/{compiler}").exists() or _processes_mentioning(mark) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pip.pid, signal.SIGKILL)
    ours = lambda: list((tmp_path / "tmp").glob("fa-shim-*"))  # noqa: E731 (pip's are pip's)
    assert _until(lambda: not ours(), 10), ours()
    assert not list((cache / ".locks").glob("*.lock*"))
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    # the next builder of the same wheel neither waits nor finds a half entry
    (tmp_path / "hang").unlink()
    t0 = time.monotonic()
    proc = subprocess.run(
        pip_wheel_cmd(PY, tmp_path / "next", *args), env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "another build of the same wheel holds" not in proc.stderr
    assert "wheel cache hit" not in proc.stderr  # the killed build stored nothing
    print(f"\n{kill}: the next build took {time.monotonic() - t0:.0f} s")
