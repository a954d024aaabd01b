"""Progress while compiling (fa_backend/pipeline/_progress.py), in-process on the launcher's
records (real files, as resources/launcher.py writes them): the line the monitor shows from
nothing started to everything compiled, what it says is running and left, when a line goes to
every sink and when only the terminal's in-place status changes, and the progress setting's
check. Real pip in a pseudo-terminal: tests/integration/test_progress_terminal.py."""

from __future__ import annotations

import json
import re
import time

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.pipeline import _progress, _stats
from fa_backend.schedule import _schedule

SOURCES = ["flash_api.cpp", "fwd_a.cu", "fwd_b.cu"]
MACHINE = _schedule.Machine(jobs=2, threads=1, cores=2, archs=1)


def _append(path, **record) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def _started(stats, source: str, ago: float) -> float:
    started = round(time.time() - ago, 2)
    _append(_stats.started_file(stats), source=source, started=started)
    return started


def _finished(stats, source: str, started: float, seconds: float, exit: int = 0) -> None:
    record = {"seconds": seconds, "started": started, "peak_rss_mib": 100, "exit": exit}
    _append(stats, source=source, **record)


@pytest.fixture
def monitor(tmp_path, monkeypatch):
    monkeypatch.setenv(_progress.INTERVAL_ENV, "3600")  # no timed line during a test
    display = _progress.Display("stderr", tmp_path / "build.log")
    yield _progress.Monitor(display, SOURCES, _stats.stats_file(tmp_path), MACHINE, lambda s: 60.0)
    display.close()


def test_the_setting_is_checked_in_any_case():
    assert _progress.check_mode(" TTY ") == "tty" and _progress.check_mode("") == "auto"
    with pytest.raises(FaShimError) as info:
        _progress.check_mode("loud")
    assert (
        info.value.cause == "setting progress is 'loud', expected one of auto, tty, stderr, none."
    )


def test_before_the_first_compile_the_heartbeat_says_starting(monitor):
    text, complete = monitor.text()
    assert re.fullmatch(r"0:0\d starting the compile \(0/3 done\)", text) and not complete


def test_while_compiling_it_names_what_runs_and_what_is_left(monitor):
    stats = monitor.stats_file
    _started(stats, "fwd_a.cu", ago=10)
    _started(stats, "fwd_b.cu", ago=40)
    text, complete = monitor.text()
    # the longest running first; the ETA from the cost model: 60 s a source, 2 jobs
    assert re.fullmatch(r"0:0\d compiling fwd_b\.cu, fwd_a\.cu \(0/3 done, ~1 min left\)", text), (
        text
    )
    assert not complete


def test_finished_sources_count_and_rescale_the_rest(monitor):
    stats = monitor.stats_file
    _finished(stats, "fwd_a.cu", _started(stats, "fwd_a.cu", ago=130), 120.0)  # twice the model
    _started(stats, "fwd_b.cu", ago=5)
    finished, running, pending = monitor.state()
    assert finished == [("fwd_a.cu", 120.0)] and pending == ["flash_api.cpp"]
    assert [name for name, _ in running] == ["fwd_b.cu"]
    text, complete = monitor.text()
    assert re.fullmatch(r"compiled 1/3 \(33%\) in 0:0\d, ~\d+ min left; compiling fwd_b\.cu", text)
    assert not complete


def test_a_killed_compile_is_pending_again_and_a_probe_is_nothing(monitor):
    """The out-of-memory retry compiles it again; nvcc's own probes name no source."""
    stats = monitor.stats_file
    _finished(stats, "?", _started(stats, "?", ago=1), 0.1)
    _finished(stats, "fwd_a.cu", _started(stats, "fwd_a.cu", ago=2), 1.0, exit=-9)
    finished, running, pending = monitor.state()
    assert finished == [] and running == [] and pending == SOURCES


def test_everything_compiled_is_the_last_line_on_every_sink(monitor, tmp_path, capsys):
    stats = monitor.stats_file
    for source in SOURCES:
        _finished(stats, source, _started(stats, source, ago=3), 2.0)
    assert monitor.update() is True and monitor.complete
    line = capsys.readouterr().err.strip()
    assert re.fullmatch(r"fa-shim: compiled 3/3 \(100%\) in 0:0\d", line), line
    monitor.display.close()
    assert (tmp_path / "build.log").read_text() == line + "\n"


def test_between_lines_only_the_terminals_status_changes(monitor, capsys, tmp_path):
    assert monitor.update() is False  # not due (interval 3600 s), not complete: no line
    assert capsys.readouterr().err == ""
    assert monitor.update(force=True) is False  # the end of the compile forces one
    assert "starting the compile" in capsys.readouterr().err


def test_progress_none_writes_only_the_log(tmp_path, capsys):
    display = _progress.Display("none", tmp_path / "log")
    display.line("about to compile 1 source(s)")
    display.status("0:01 compiling x.cu")
    display.close()
    assert capsys.readouterr().err == ""
    assert (tmp_path / "log").read_text() == "fa-shim: about to compile 1 source(s)\n"
