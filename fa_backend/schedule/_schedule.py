"""How long compiling a set of sources takes on a machine: list scheduling of per-source costs
(one core's time for one architecture, from each flavour's measured cost model), scaled by the
architectures, nvcc threads and cores; while compiling it gives the ETA (`remaining`)."""

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
