"""The compiler launcher (fa_backend/resources/launcher.py) on real processes: one record per
translation unit, read back by pipeline/_stats, and a SIGKILL named in the compiler's words that
the out-of-memory diagnosis (pipeline/_upstream) recognises. And the runner of the upstream build
child (pipeline/_upstream.py): its output to the log and back, and its process group stopped."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fa_backend.pipeline import _stats, _upstream
from fa_backend.pipeline._upstream import LAUNCHER


def test_launcher_records_each_tu_and_names_a_sigkill(tmp_path):
    stats = tmp_path / "stats.jsonl"
    started = time.time()
    ok = subprocess.run([sys.executable, LAUNCHER, stats, "true", "-c", "a.cpp"], check=False)
    killed = subprocess.run(
        [sys.executable, LAUNCHER, stats, "sh", "-c", "kill -9 $$", "-c", "b.cu"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0
    assert killed.returncode == 128 + signal.SIGKILL
    assert "killed by signal 9 (SIGKILL)" in killed.stderr
    assert _upstream.killed_for_memory(killed.stderr)
    records = [json.loads(line) for line in stats.read_text().splitlines()]
    assert [r["exit"] for r in records] == [0, -9]
    assert records[0]["source"] == "a.cpp"
    assert records[1]["source"] == "b.cu"
    # the record's clock is the real one: `true` ran after the test started and took < 1 min
    assert started - 1 <= records[0]["started"] <= time.time() and records[0]["seconds"] < 60
    assert _stats.tu_stats(stats) == records


def test_the_runner_logs_the_whole_output_and_returns_this_runs(tmp_path, capsys):
    log = tmp_path / "build.log"
    log.write_text("an earlier attempt\n")
    command = ["sh", "-c", "echo one; echo two >&2; exit 3"]
    code, output = _upstream.run_logged(command, tmp_path, {"PATH": "/usr/bin:/bin"}, log)
    assert (code, output) == (3, "one\ntwo\n")
    assert log.read_text() == "an earlier attempt\none\ntwo\n"
    assert capsys.readouterr().err == ""  # echoed only under verbose


def test_ctrl_c_that_reached_the_childs_group_first_is_ctrl_c_here(tmp_path):
    """A child that died of SIGINT (a terminal's Ctrl-C reaches its group) is re-raised here as
    Ctrl-C. The child resets SIGINT first: a suite started in the background by a
    non-interactive shell inherits it ignored."""
    code = "import os, signal; signal.signal(signal.SIGINT, signal.SIG_DFL); os.kill(0, 2)"
    with pytest.raises(KeyboardInterrupt):
        _upstream.run_logged([sys.executable, "-c", code], tmp_path, {}, tmp_path / "log")


def test_stopping_the_group_ends_the_child_and_its_children(tmp_path):
    marker = tmp_path / "pid"
    proc = subprocess.Popen(
        ["sh", "-c", f"sleep 300 & echo $! > {marker}; wait"], start_new_session=True
    )
    deadline = time.monotonic() + 30
    while not marker.is_file() or not marker.read_text().strip():
        assert time.monotonic() < deadline, "the child never started its own child"
        time.sleep(0.05)
    _upstream.stop_group(proc, grace=10)
    assert proc.poll() is not None
    grandchild = int(marker.read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{grandchild}").exists() and _state(grandchild) not in ("Z", "X"):
        assert time.monotonic() < deadline, "the compiler's own child outlived the group"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return "X"
