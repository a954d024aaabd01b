"""Compile jobs planned from each unit's own expected peak memory: ninja pools cap the heavy
units (memory classes, peaks rounded up to a GiB) to a number that fits, while light ones fill
the cores. Depths grow a step at a time where the simulated build ends soonest."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from . import _schedule

GIB = 1024**3
HEADROOM = 1.05  # a unit's peak moves a little between builds; plan for 5 % more


@dataclasses.dataclass(frozen=True)
class MemoryClass:
    gib: int  # the class: peaks in (gib - 1, gib] GiB
    units: frozenset[str]
    depth: int  # at most this many at once

    @property
    def pool(self) -> str:
        return f"fa_shim_mem_{self.gib}g"


@dataclasses.dataclass(frozen=True)
class Pools:
    """Jobs, and the memory classes whose units a pool caps (the others run freely)."""

    jobs: int
    capped: tuple[MemoryClass, ...] = ()

    @property
    def pool_of(self) -> dict[str, str]:
        return {name: c.pool for c in self.capped for name in c.units}

    @property
    def depths(self) -> dict[str, int]:
        return {c.pool: c.depth for c in self.capped}


def classes(peaks: Mapping[str, int]) -> dict[int, frozenset[str]]:
    """{GiB rounded up: the units of that class}, heaviest first."""
    found: dict[int, set[str]] = {}
    for name, peak in peaks.items():
        found.setdefault(max(1, math.ceil(peak / GIB)), set()).add(name)
    return {gib: frozenset(found[gib]) for gib in sorted(found, reverse=True)}


def worst_case(peaks: Mapping[str, int], pools: Pools) -> int:
    """The most memory the plan can hold at once: the heaviest `jobs` of each class's heaviest
    units up to its depth (all of an uncapped class)."""
    capped = {name: c for c in pools.capped for name in c.units}
    allowed: list[int] = []
    for c in pools.capped:
        allowed += sorted((peaks[n] for n in c.units), reverse=True)[: c.depth]
    allowed += [p for n, p in peaks.items() if n not in capped]
    return int(sum(sorted(allowed, reverse=True)[: pools.jobs]) * HEADROOM)


def _pools(jobs: int, groups: Mapping[int, frozenset[str]], depths: Mapping[int, int]) -> Pools:
    """The plan of these depths: a class whose depth lets all of it (or jobs) run needs no pool."""
    jobs = min(jobs, sum(min(depths[gib], len(units)) for gib, units in groups.items()))
    capped = tuple(
        MemoryClass(gib, groups[gib], depths[gib])
        for gib in groups
        if depths[gib] < min(len(groups[gib]), jobs)
    )
    return Pools(jobs, capped)


def plan(
    peaks: Mapping[str, int], jobs: int, memory: int, seconds: Mapping[str, float] | None = None
) -> Pools:
    """The plan of at most `jobs` jobs that fits `memory` and ends first by the simulated build
    (seconds: each unit's expected time, else equal): no pool, or pools over the classes."""
    if not peaks:
        return Pools(max(1, jobs))
    times = dict(seconds or dict.fromkeys(peaks, 1.0))
    order = sorted(times, key=lambda n: (-times[n], n))  # as ninja gets them: longest first
    top = max(1, min(jobs, len(peaks)))
    free = next(
        (Pools(n) for n in range(top, 0, -1) if worst_case(peaks, Pools(n)) <= memory), None
    )
    if free is not None and free.jobs == top:
        return free  # every unit may run with every other: no pool
    # grown greedily, more slots can end later (the full FA3 set on 16 cores: 2,871 s over 16
    # slots, 2,409 s over 14), so every count above the free plan's is grown and simulated
    first = free.jobs + 1 if free else 1
    grown = [_grown(peaks, slots, memory, order, times) for slots in range(first, top + 1)]
    candidates = [p for p in (free, *grown) if p is not None]
    if not candidates:
        return Pools(1)  # one unit alone may not fit: nothing is left to lower

    def end(p: Pools) -> float:
        return _schedule.simulate(order, times, p.jobs, p.pool_of, p.depths)

    return min(candidates, key=lambda p: (end(p), -p.jobs))


def _grown(
    peaks: Mapping[str, int], slots: int, memory: int, order: list[str], times: dict
) -> Pools | None:
    """Pools grown from one unit per class while the plan fits; None where that does not fit."""
    groups = classes(peaks)
    depths = dict.fromkeys(groups, 1)
    if worst_case(peaks, _pools(slots, groups, depths)) > memory:
        return None
    while True:
        steps = []
        for gib in groups:
            if depths[gib] >= min(len(groups[gib]), slots):
                continue
            trial = _pools(slots, groups, {**depths, gib: depths[gib] + 1})
            if worst_case(peaks, trial) <= memory:
                end = _schedule.simulate(order, times, trial.jobs, trial.pool_of, trial.depths)
                steps.append((end, -gib, gib))
        if not steps:
            return _pools(slots, groups, depths)
        depths[min(steps)[2]] += 1


def lower(peaks: Mapping[str, int], pools: Pools) -> Pools | None:
    """After an out-of-memory kill: the heaviest class running several at once runs half as many;
    once every class runs one at a time, half the jobs. None: one job already."""
    capped = {c.gib: c for c in pools.capped}
    for gib, units in classes(peaks).items():
        running = capped[gib].depth if gib in capped else min(len(units), pools.jobs)
        if running > 1:
            lowered = MemoryClass(gib, units, running // 2)
            kept = tuple(c for c in pools.capped if c.gib != gib)
            return Pools(pools.jobs, tuple(sorted((*kept, lowered), key=lambda c: -c.gib)))
    if pools.jobs > 1:
        return dataclasses.replace(pools, jobs=max(1, pools.jobs // 2))
    return None


def describe(pools: Pools) -> str:
    if not pools.capped:
        return f"{pools.jobs} job(s), every unit free to run beside every other"
    caps = ", ".join(f"{c.depth} of the {len(c.units)} units of {c.gib} GiB" for c in pools.capped)
    return f"{pools.jobs} job(s), at most {caps} at once (ninja pools)"
