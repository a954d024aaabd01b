"""The live ETA (schedule/_schedule.remaining, the "~N min left" of pipeline/_progress's line)
replayed on a recorded build, in-process.

Recorded: FA2's full set on the H100 box of lease e (2026-11-25: 73 units, 16 jobs on 16 cores,
sm_90, compiled in 1,007 s), each unit's start time and seconds as the compiler launcher wrote
them (bench/results/2026-11-25-h100-lease-e/fa2-full-tus.jsonl). Not the cost model's own
calibration run (run3), so the model's misjudgements of this build are real ones.
Derived: a unit's end (start + seconds); at each unit's end from 30 % of the units done, what the
progress monitor reads then (the finished units and their seconds, the running ones and how long
they have run, those not started) and what was left of the compile (the last end minus now)."""

from __future__ import annotations

import json

from conftest import REPO

from fa_backend.flavours.fa2 import _costs
from fa_backend.pipeline import _progress
from fa_backend.schedule import _schedule

RECORD = REPO / "bench/results/2026-11-25-h100-lease-e/fa2-full-tus.jsonl"
MACHINE = _schedule.Machine(jobs=16, threads=1, cores=16, archs=1)
# the launcher's records and the monitor's once-a-second look are seconds apart: in the last
# half minute a quarter of what is left is less than that
SLACK_S = 10.0


def recorded() -> list[tuple[str, float, float]]:
    """(unit, start, end), seconds from the first start."""
    records = [json.loads(line) for line in RECORD.read_text().splitlines()]
    units = [r for r in records if r["source"] != "?" and r["exit"] == 0]
    t0 = min(r["started"] for r in units)
    return [(r["source"], r["started"] - t0, r["started"] - t0 + r["seconds"]) for r in units]


def test_from_30_percent_the_eta_is_within_a_quarter_of_what_was_left():
    spans = recorded()
    last, total = max(end for _, _, end in spans), len(spans)
    points, misses = 0, []
    for done, now in enumerate(sorted(end for _, _, end in spans), 1):
        if done < 0.3 * total or done == total:
            continue
        finished = [(n, end - start) for n, start, end in spans if end <= now]
        running = [(n, now - start) for n, start, end in spans if start <= now < end]
        pending = [n for n, start, _ in spans if start > now]
        eta = _schedule.remaining(pending, running, finished, MACHINE, _costs.model(0))
        left, points = last - now, points + 1
        if abs(eta - left) > max(0.25 * left, SLACK_S):
            misses.append(
                f"{done}/{total} done: {_progress._left(eta)} ({eta:.0f} s), {left:.0f} s left"
            )
    assert total == 73 and points == 51
    assert misses == []
