"""How long compiling a set of sources takes on a machine: list scheduling of per-source costs
(one core's time for one architecture, from each flavour's measured cost model), scaled by the
architectures, nvcc threads and cores; while compiling it gives the ETA (`remaining`). And the
compile jobs planned from each unit's own expected peak memory (`plan`): ninja pools cap the heavy
units (memory classes, peaks rounded up to a GiB) to a number that fits, while light ones fill
the cores; depths grow a step at a time where the simulated build ends soonest."""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

Cost = Callable[[str], float]  # one source (a basename) -> seconds, one core, one architecture

# The share of a source's time that does not repeat per architecture (host code, front end):
# an assumption, consistent with the stock four-arch objects of run2 (docs/benchmarks.md).
HOST_SHARE = 0.2
OVERHEAD_SECONDS = 30  # torch facts, extraction, upstream's prepare, link, repack, verify
RANGE = (0.7, 1.3)  # the recorded builds fall within it but one (docs/benchmarks.md, "Estimates")


@dataclasses.dataclass(frozen=True)
class Machine:
    """What the schedule runs on: compile jobs, nvcc threads per job, cores, architectures."""

    jobs: int
    threads: int
    cores: int
    archs: int

    @property
    def per_arch_parallel(self) -> int:
        return max(1, min(self.threads, self.archs))

    @property
    def slowdown(self) -> float:
        """Compilers beyond the cores share them."""
        return max(1.0, self.jobs * self.per_arch_parallel / max(1, self.cores))

    def scale(self, one_arch_seconds: float) -> float:
        """A source's wall time on this machine, from its one-arch cost."""
        waves = self.archs / self.per_arch_parallel
        return one_arch_seconds * (HOST_SHARE + (1 - HOST_SHARE) * waves) * self.slowdown


def makespan(pending: Iterable[float], slots: int, busy: Sequence[float] = ()) -> float:
    """List scheduling: each pending duration, heaviest first, goes to the slot that frees
    first; `busy` are the seconds left of what already runs (one slot each)."""
    free = sorted(busy)[:slots]
    free += [0.0] * (max(1, slots) - len(free))
    heapq.heapify(free)
    for seconds in sorted(pending, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + seconds)
    return max(free)


def predict(sources: Sequence[str], machine: Machine, cost: Cost) -> float:
    """Seconds for the whole build of these sources (basenames), overhead included."""
    durations = [machine.scale(cost(s)) for s in sources]
    return OVERHEAD_SECONDS + makespan(durations, machine.jobs)


def remaining(
    pending: Sequence[str],
    running: Sequence[tuple[str, float]],
    finished: Sequence[tuple[str, float]],
    machine: Machine,
    cost: Cost,
) -> float:
    """Seconds until the last source is compiled: model times scaled by a rate, the median of the
    measured/modelled ratios of the `finished` sources (a misjudged one moves a sum, not a
    median) and, as lower bounds, of the `running` ones so far. So while units run past their
    expected time (model x rate: a busy machine, which the model cannot know) the rate rises
    with them, and the time left for what runs and what waits grows. A `running` source past
    the rate: by the median of the finished ones slower than it so far, else a tenth more."""

    def model(name: str) -> float:
        return max(machine.scale(cost(name)), 1e-9)  # a zero cost divides nothing

    ratios = [seconds / model(name) for name, seconds in finished]
    so_far = [elapsed / model(name) for name, elapsed in running]
    from statistics import median  # (fractions, decimal): the live ETA's, not a hit's

    rate = max(median(ratios) if ratios else 1.0, median([*ratios, *so_far]) if so_far else 0.0)
    busy = []
    for (name, elapsed), seen in zip(running, so_far):
        slower = [r for r in ratios if r > seen]
        if seen < rate:
            busy.append(model(name) * rate - elapsed)
        elif slower:
            busy.append(model(name) * median(slower) - elapsed)
        else:  # never "0 min left" while it runs
            busy.append(0.1 * elapsed)
    return makespan([model(name) * rate for name in pending], machine.jobs, busy)


def time_range(seconds: float, busy: float = 1.0) -> str:
    """The estimate as the range the recorded builds fell in: '8-13 min', '2.1-3.4 h'; on a busy
    machine (`busy`: its load average per core, above 1) its top that many times higher: others'
    work slows every compile about that much, and the model assumes free cores."""
    low, high = seconds * RANGE[0], seconds * RANGE[1] * max(1.0, busy)
    if high < 90:
        return f"{max(1, round(low / 10) * 10)}-{math.ceil(high / 10) * 10} s"
    if high < 2 * 3600:
        return f"{max(1, round(low / 60))}-{max(2, math.ceil(high / 60))} min"
    return f"{low / 3600:.1f}-{high / 3600:.1f} h"


def uniform(name: str) -> float:
    """Every source alike: without a cost model the ETA comes from the sources compiled."""
    return 1.0


def simulate(
    order: Sequence[str],
    seconds: Mapping[str, float],
    slots: int,
    pool_of: Mapping[str, str] | None = None,
    depths: Mapping[str, int] | None = None,
    running: Sequence[tuple[float, str]] = (),
    now: float = 0.0,
) -> float:
    """The makespan ninja gives these units started in `order` on `slots` jobs (a free slot takes
    the first whose pool has room); a build carried on from a stop starts at `now`."""
    pool_of, depths = pool_of or {}, depths or {}
    if not depths:  # no pool: each unit in turn takes the slot that frees first
        free = [end for end, _ in running] + [now] * (max(1, slots) - len(running))
        heapq.heapify(free)
        for name in order:
            heapq.heappush(free, max(now, heapq.heappop(free)) + seconds[name])
        return max(free)
    queues: dict[str | None, list[str]] = {}
    for name in reversed(order):  # each pool's units, next one last (pop)
        queues.setdefault(pool_of.get(name), []).append(name)
    rank = {name: i for i, name in enumerate(order)}
    running = list(running)
    heapq.heapify(running)
    in_pool = Counter(pool_of.get(name) for _, name in running)  # None (no pool) is never read
    end = now
    while any(queues.values()) or running:
        while len(running) < max(1, slots):
            ready = [
                q[-1] for p, q in queues.items() if q and (p is None or in_pool[p] < depths[p])
            ]
            if not ready:
                break
            name = min(ready, key=rank.__getitem__)
            queues[pool_of.get(name)].pop()
            in_pool[pool_of.get(name)] += 1
            heapq.heappush(running, (now + seconds[name], name))
        now, done = heapq.heappop(running)
        end = max(end, now)
        in_pool[pool_of.get(done)] -= 1
    return end


# run-to-run spread of a unit's time around the model: the order is chosen to do well across it
_SPREAD = 0.1
_SCENARIOS = 6
_SEARCH_STEPS = 1_000_000  # unit placements per search: under a second, whatever the set


def best_order(
    seconds: Mapping[str, float],
    slots: int,
    pool_of: Mapping[str, str] | None = None,
    depths: Mapping[str, int] | None = None,
) -> list[str]:
    """The order to start the units in: longest first (7.5 % over the bound on FA2's full set),
    improved by pair swaps that shorten the mean makespan over seeded +-10 % spreads of the
    times (1-2 %, docs/benchmarks.md). Deterministic."""
    names = sorted(seconds, key=lambda n: (-seconds[n], n))
    if len(names) <= max(1, slots):
        return names
    scenarios = [dict(seconds)]
    for k in range(_SCENARIOS - 1):
        rng = random.Random(k)
        scenarios.append({n: seconds[n] * rng.uniform(1 - _SPREAD, 1 + _SPREAD) for n in names})

    def score(order: list[str]) -> tuple[float, float]:
        # the mean makespan, then how late the long units start: among orders that end alike,
        # the one nearest longest-first (an unmodelled slow unit then hurts least)
        ends = sum(simulate(order, s, slots, pool_of, depths) for s in scenarios)
        return round(ends, 6), sum(i * seconds[n] for i, n in enumerate(order))

    best, best_score = names, score(names)
    rng = random.Random(0)
    steps = _SEARCH_STEPS // (10 if depths else 1)  # a pooled replay costs about 10 times more
    for _ in range(steps // (len(names) * len(scenarios))):
        i, j = rng.randrange(len(names)), rng.randrange(len(names))
        if seconds[best[i]] == seconds[best[j]]:
            continue
        trial = best[:]
        trial[i], trial[j] = trial[j], trial[i]
        trial_score = score(trial)
        if trial_score < best_score:
            best, best_score = trial, trial_score
    return best


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
        return simulate(order, times, p.jobs, p.pool_of, p.depths)

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
                end = simulate(order, times, trial.jobs, trial.pool_of, trial.depths)
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
