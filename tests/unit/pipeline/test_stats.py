"""The compiler launcher's records as the pipeline reads them (fa_backend/pipeline/_stats.py):
where they sit in a run's scratch, the translation units compiled so far (not nvcc's own probes,
not failed compiles), the compile phase's span and the objects the object cache served. The
records are the launcher's own lines (resources/launcher.py writes one JSON object per compiled
unit); tests/integration/test_launcher.py and test_object_cache.py have it write them for real."""

from __future__ import annotations

import json

import pytest

from fa_backend.pipeline import _stats
from fa_backend.resources import launcher

RECORDS = [  # two jobs side by side, an nvcc probe (no source), a unit the OOM killer ended
    {"source": "flash_api.cpp", "seconds": 40.0, "started": 1000.0, "peak_rss_mib": 900, "exit": 0},
    {"source": "?", "seconds": 0.5, "started": 1001.0, "peak_rss_mib": 20, "exit": 0},
    {"source": "fwd_a.cu", "seconds": 100.0, "started": 1010.0, "peak_rss_mib": 4000, "exit": 0},
    {"source": "fwd_b.cu", "seconds": 30.0, "started": 1041.0, "peak_rss_mib": 7000, "exit": -9},
]


def _write(path, records) -> None:
    # one line per unit, as the launcher appends them (blank lines are never meaningful)
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "\n")


def test_the_records_sit_in_the_scratch_next_to_their_started_file(tmp_path):
    stats = _stats.stats_file(tmp_path)
    assert stats == tmp_path / _stats.STATS_FILE == tmp_path / "compile-stats.jsonl"
    assert _stats.started_file(stats) == launcher.started_file(stats)
    assert _stats.started_file(stats).name == "compile-stats.jsonl.started"


def test_no_file_yet_is_no_record(tmp_path):
    stats = _stats.stats_file(tmp_path)
    assert _stats.tu_stats(stats) == [] and _stats.compiled(stats) == []
    assert _stats.compile_span([]) == 0.0


def test_every_line_is_a_record_and_compiled_leaves_out_probes_and_failures(tmp_path):
    stats = _stats.stats_file(tmp_path)
    _write(stats, RECORDS)
    assert _stats.tu_stats(stats) == RECORDS
    assert [r["source"] for r in _stats.compiled(stats)] == ["flash_api.cpp", "fwd_a.cu"]


def test_the_span_runs_from_the_first_start_to_the_last_end():
    assert _stats.compile_span(RECORDS) == pytest.approx(1110.0 - 1000.0)  # fwd_a ends last
    assert _stats.compile_span([{"source": "old.cu", "seconds": 5.0, "exit": 0}]) == 0.0


def test_served_names_each_object_the_cache_gave_once_by_source(tmp_path):
    """The launcher's `object` (resources/object_cache.serve's record), which the wheel's
    provenance lists; a compiled unit has none, and a unit served again (a retried run's
    records follow the first's) is named once."""
    entry = {"key": "ab12-cd34", "source": "fwd_b.cu", "built_under": "torch 2.11.0", "host": "n1"}
    other = {**entry, "key": "ef56-7890", "source": "fwd_a.cu"}
    served = [
        {**RECORDS[2], "source": s["source"], "cached": True, "object": s} for s in (entry, other)
    ]
    stats = _stats.stats_file(tmp_path)
    _write(stats, [*RECORDS, *served, served[0]])
    assert _stats.served(stats) == [other, entry]
    assert _stats.served(_stats.stats_file(tmp_path / "none")) == []


def test_a_served_unit_is_not_compiled(tmp_path):
    """The object cache's units count neither in progress ("compiled 4/1 (400%)", seen in a
    prebuild's log) nor in the compile's time."""
    served = {"source": "k.cu", "seconds": 0.1, "started": 1000.0, "exit": 0, "cached": True}
    _write(_stats.stats_file(tmp_path), [served, RECORDS[0]])
    assert [r["source"] for r in _stats.compiled(_stats.stats_file(tmp_path))] == ["flash_api.cpp"]
