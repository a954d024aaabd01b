"""The prepared build (Prepared) and how its compile units run: the order ninja starts them in
and how many heavy ones run at once (pools over each unit's expected peak memory), both from
schedule/_schedule, written into build.ninja; an out-of-memory kill lowers the pool."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import _atomic, _log
from ..resources.upstream_driver import schedule_ninja
from ..schedule import _schedule
from ..toolchain import _jobs
from ..toolchain._compile_commands import Command
from . import _stats

if TYPE_CHECKING:
    from ..flavours._interface import Plan, Tools


@dataclasses.dataclass(frozen=True)
class Wrappers:
    """What a caller puts around the build's compilers (fleet: the compiler and object caches);
    the build itself keeps and reads no cache. `serve` ("module:function") is asked first for
    each compile, once `units` has written the spec it reads (resources/launcher.SPEC_NAME,
    beside the run's own records: the source tree's parent)."""

    env: Mapping[str, str] = dataclasses.field(default_factory=dict)  # the user's own win
    serve: str | None = None
    # build.ninja written: the sources `serve` answers without compiling
    units: Callable[[Tools, Path, Sequence[Command]], frozenset[str]] | None = None


BARE = Wrappers()  # nothing around the compilers


@dataclasses.dataclass
class Prepared:
    """A source tree ready to compile: laid out and patched by the flavour, its build.ninja
    written by torch and checked (the prepare step's result, which the compile step takes)."""

    source: Path  # the directory of upstream's setup.py
    tools: Tools
    ninja_file: Path
    commands: list[Command]
    report: dict  # the upstream driver's (resources/upstream_driver)
    log: Path
    compile_plan: CompilePlan | None = None  # order and pools (None: the jobs alone)
    cached: frozenset[str] = frozenset()  # sources the wrappers serve (no compile)
    wrappers: Wrappers = BARE

    @property
    def stats_file(self) -> Path:
        # the run's own files sit beside the source tree (FA3: beside hopper/, in the layout)
        return _stats.stats_file(self.source.parent)


@dataclasses.dataclass(frozen=True)
class CompilePlan:
    pools: _schedule.Pools
    order: tuple[str, ...]  # empty: the flavour's patterns order the units
    peaks: Mapping[str, int]  # bytes per compile job; empty without a memory model

    @property
    def jobs(self) -> int:
        return self.pools.jobs

    @classmethod
    def jobs_only(cls, jobs: int) -> CompilePlan:
        return cls(_schedule.Pools(jobs), (), {})

    def driver_spec(self) -> dict:
        """What the upstream driver writes into build.ninja (order, pool)."""
        return {
            "unit_order": list(self.order),
            "pools": self.pools.depths,
            "unit_pools": self.pools.pool_of,
        }

    def lowered(self) -> CompilePlan | None:
        """The plan after an out-of-memory kill (None: one job already)."""
        pools = _schedule.lower(self.peaks, self.pools)
        return dataclasses.replace(self, pools=pools) if pools else None


def make(plan: Plan, tools: Tools, sources: Sequence[str], cores: int, memory: int) -> CompilePlan:
    flavour, settings = plan.flavour, plan.settings
    machine = _schedule.Machine(
        tools.jobs, tools.nvcc_threads or 1, cores, len(tools.archs.targets) if tools.archs else 1
    )
    costs = flavour.costs(plan)
    cost, memory_model = (costs.seconds, costs.peak_bytes) if costs else (None, None)
    seconds = {s: machine.scale(cost(s)) for s in sources} if cost else None
    if memory_model is None:
        pools = _schedule.Pools(tools.jobs)
        peaks: dict[str, int] = {}
    else:
        # a job compiling k architectures at once holds more (toolchain/_jobs' figures)
        per_job = machine.per_arch_parallel
        scale = _jobs.job_bytes(per_job) / _jobs.job_bytes(1)
        peaks = {s: int(memory_model(s) * scale) for s in sources}
        slots = settings.max_jobs or max(1, cores // per_job)
        pools = _schedule.plan(peaks, slots, memory, seconds)
        if settings.max_jobs and pools.jobs != settings.max_jobs:
            pools = _schedule.Pools(settings.max_jobs)  # the setting's jobs, as given
        largest = _jobs.gib(max(peaks.values(), default=0))
        _log.info(
            f"compile plan: {_schedule.describe(pools)}; each unit's expected peak from its "
            f"release's measurements (largest {largest}, {_jobs.gib(memory)} available)"
        )
    order = (
        _schedule.best_order(seconds, pools.jobs, pools.pool_of, pools.depths) if seconds else []
    )
    return CompilePlan(pools, tuple(order), peaks)


def apply(ninja_file: Path, compile_plan: CompilePlan) -> None:
    """The prepared build.ninja as the build will run it (prepare's output shows the plan)."""
    text = ninja_file.read_text()
    scheduled = schedule_ninja(text, compile_plan.driver_spec())
    if scheduled != text:
        _atomic.write(ninja_file, scheduled.encode())


def retry_message(before: CompilePlan, after: CompilePlan, done: int) -> str:
    """What the build says when it retries after an out-of-memory kill."""
    old = {c.gib: c.depth for c in before.pools.capped}
    changed = [c for c in after.pools.capped if old.get(c.gib) != c.depth]
    what = "".join(
        f"at most {c.depth} of the {len(c.units)} units of {c.gib} GiB at once, " for c in changed
    )
    return (
        f"a compiler was killed for lack of memory; retrying with {what}{after.jobs} job(s), "
        f"keeping the {done} object(s) already compiled (set -C max-jobs to choose)"
    )
