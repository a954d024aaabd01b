"""The compiler launcher's records of one upstream run (resources/launcher): where they are in
the scratch, and each translation unit's start, time, peak memory, exit status and, where the
object cache served it, that entry's record."""

from __future__ import annotations

import json
from pathlib import Path

from ..resources.launcher import started_file as started_file  # the launcher's own

STATS_FILE = "compile-stats.jsonl"  # one JSON line per compiled TU, in the scratch


def stats_file(scratch: Path) -> Path:
    """Where the compiler launcher records each TU of the upstream run in scratch."""
    return scratch / STATS_FILE


def tu_stats(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compiled(path: Path) -> list[dict]:
    """The translation units compiled so far: not nvcc's own probes, which name no source, nor
    the units a wrapper served (the object cache), which no compile's progress or time counts."""
    return [
        r
        for r in tu_stats(path)
        if r.get("source") != "?" and r["exit"] == 0 and not r.get("cached")
    ]


def compile_span(stats: list[dict]) -> float:
    """Seconds from the first translation unit's start to the last one's end."""
    timed = [r for r in stats if "started" in r]
    if not timed:
        return 0.0
    return max(r["started"] + r["seconds"] for r in timed) - min(r["started"] for r in timed)


def served(path: Path) -> list[dict]:
    """The object-cache entries the run linked instead of compiling (the launcher's `object`:
    key, source, sha256, the torch built under, host, flags), one per source, by source."""
    found = {r["object"]["source"]: r["object"] for r in tu_stats(path) if r.get("object")}
    return [found[source] for source in sorted(found)]
