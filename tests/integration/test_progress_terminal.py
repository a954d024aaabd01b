"""Progress a pip user can see: real pip (no -v) in a pseudo-terminal builds the sample project;
the estimate block, the heartbeat and the final count reach the terminal (pip shows none of the
backend's stderr), in place; nothing reaches stdout; the log file has the lines too."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PY, REPO, run, sample_settings, slow_cxx

from fa_backend.pipeline import _progress
from fa_backend.settings import _settings

pytestmark = pytest.mark.slow


def _in_pty(argv: list, env: dict, stdout: Path | None = None, timeout: float = 600):
    """Run argv as a session leader whose controlling terminal is a new pty (what a user's
    shell gives pip); stdout (and stderr) to a file when given. Returns (status, terminal)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once, never return into pytest
        try:
            if stdout is not None:
                out = os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                err = os.open(f"{stdout}.stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(out, 1)
                os.dup2(err, 2)
            os.chdir(REPO)
            os.execve(str(argv[0]), [str(a) for a in argv], env)
        finally:
            os._exit(127)
    seen = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 5)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: every writer of the terminal is gone
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), seen.decode(errors="replace")


def _env(tmp_path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FA_SHIM_", "PIP_VERBOSE"))}
    env.pop("PYTHONPATH", None)
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    env["TERM"] = "xterm"
    # a compile of 3 s, whatever the machine: the heartbeat has a running source to show
    env.update(slow_cxx(tmp_path, 'case "$*" in *" -c "*) sleep 3;; esac'))
    env.update(extra)
    return env


def _log_text(tmp_path) -> str:
    logs = list((tmp_path / "xdg" / "fa-shim" / "logs").glob("*.log"))
    assert logs, "no build log"
    return "\n".join(p.read_text() for p in logs)


def test_plain_pip_wheel_shows_progress_on_the_terminal(host_venv, sample_sdist_dir, tmp_path):
    out = tmp_path / "wheels"
    code, terminal = _in_pty(
        [
            *(host_venv, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", out),
            *(REPO, *sample_settings(sample_sdist_dir), "-C", "wheel-cache=false"),
        ],
        _env(tmp_path),
    )
    assert code == 0, terminal[-3000:]
    assert list(out.glob("flash_attn-*.whl")), terminal[-3000:]
    # pip without -v hides the backend's stderr: these came through /dev/tty
    assert "running upstream setup.py" not in terminal, "pip showed stderr: not a hidden build"
    assert "fa-shim: about to compile 1 source(s)" in terminal, terminal[-3000:]
    assert re.search(r"estimate: \d+-\d+ (s|min)", terminal), terminal[-3000:]
    # the heartbeat before the first source is compiled: elapsed time and what compiles
    assert re.search(r"fa-shim: 0:\d\d compiling flash_api\.cpp \(0/1 done, ", terminal), terminal
    assert "\r\x1b[K" in terminal, "the progress line is not updated in place"
    assert re.search(r"fa-shim: compiled 1/1 \(100%\) in \d+:\d\d\r?\n", terminal), terminal
    log = _log_text(tmp_path)
    assert "fa-shim: about to compile 1 source(s)" in log
    assert "fa-shim: compiled 1/1 (100%)" in log


def test_hook_writes_nothing_to_stdout_and_the_heartbeat_to_every_sink(
    host_venv, sample_sdist_dir, tmp_path
):
    """The build_wheel hook itself, with a terminal, stdout and stderr apart; the heartbeat
    interval shortened (_FA_SHIM_PROGRESS_INTERVAL_S, a test knob) so its plain lines appear."""
    config = dict(item.split("=", 1) for item in sample_settings(sample_sdist_dir)[1::2])
    config.update({"wheel-cache": "false", "progress": "tty"})
    code = f"import fa_backend; fa_backend.build_wheel({str(tmp_path / 'w')!r}, {config!r})"
    stdout = tmp_path / "stdout.txt"
    status, terminal = _in_pty(
        [host_venv, "-c", code], _env(tmp_path, _FA_SHIM_PROGRESS_INTERVAL_S="1"), stdout
    )
    stderr = Path(f"{stdout}.stderr").read_text()
    assert status == 0, stderr[-3000:]
    assert stdout.read_text() == "", "the backend wrote to stdout"
    heartbeat = re.compile(r"fa-shim: 0:\d\d compiling flash_api\.cpp \(0/1 done, ")
    for where, text in (("terminal", terminal), ("stderr", stderr), ("log", _log_text(tmp_path))):
        assert "fa-shim: about to compile 1 source(s)" in text, where
        assert heartbeat.search(text), f"no heartbeat in the {where}:\n{text[-2000:]}"
        assert "fa-shim: compiled 1/1 (100%)" in text, where


def test_progress_setting_is_checked_before_anything_runs(tmp_path):
    proc = subprocess.run(
        [PY, "-c", "import fa_backend; fa_backend.build_wheel('w', {'progress': 'loud'})"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
    )
    assert proc.returncode == 1
    assert "setting progress is 'loud', expected one of auto, tty, stderr, none" in proc.stderr
    assert "running upstream" not in proc.stderr and proc.stdout == ""


def test_frontend_verbosity_is_read_from_the_parent(tmp_path):
    """auto picks the terminal only when the frontend hides stderr: pip -v shows it."""
    probe = "from fa_backend.pipeline import _progress; print(_progress.frontend_shows_output())"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {probe!r}])"
    for extra, expected in (([], "False"), (["-v"], "True"), (["--verbose"], "True")):
        proc = run(
            [PY, "-c", child, *extra], cwd=REPO, env=_env(tmp_path), stdin=subprocess.DEVNULL
        )
        assert proc.stdout.strip() == expected, (extra, proc.stdout, proc.stderr)
    assert "progress" in _settings.FIELDS and _progress.MODES == ("auto", "tty", "stderr", "none")
