"""The out-of-memory diagnosis and the compiler launcher's records, on real processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from fa_backend.pipeline import _runner, _stats
from fa_backend.pipeline._upstream import LAUNCHER


def test_oom_kills_are_recognised_in_compiler_words():
    assert _runner.killed_for_memory("g++: fatal error: Killed signal terminated program cc1plus")
    assert _runner.killed_for_memory("nvcc error   : 'cicc' died due to signal 9 (Kill signal)")
    assert _runner.killed_for_memory("fa-shim: the compiler was killed by signal 9 (SIGKILL)")
    assert not _runner.killed_for_memory("error: expected ';' before '}' token")


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
    assert _runner.killed_for_memory(killed.stderr)
    records = [json.loads(line) for line in stats.read_text().splitlines()]
    assert [r["exit"] for r in records] == [0, -9]
    assert records[0]["source"] == "a.cpp"
    assert records[1]["source"] == "b.cu"
    # the record's clock is the real one: `true` ran after the test started and took < 1 min
    assert started - 1 <= records[0]["started"] <= time.time() and records[0]["seconds"] < 60
    assert _stats.tu_stats(stats) == records
