"""The estimate block printed before compiling (and by doctor): what will be compiled, where the
architectures and jobs come from, and how long it takes by the flavour's cost model."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from ..schedule import _schedule

SUGGEST_ABOVE_SECONDS = 30 * 60


@dataclasses.dataclass(frozen=True)
class Preview:
    seconds: float | None  # None: the flavour has no cost model
    lines: tuple[str, ...]  # the block, without the "fa-shim: " prefix
    machine: _schedule.Machine
    cost: _schedule.Cost  # what progress rescales by the sources compiled (uniform: no model)


def build_sources(commands) -> list[str]:
    """The sources a prepared build compiles (basenames of build.ninja's commands)."""
    return [c.file.rsplit("/", 1)[-1] for c in commands]


def preview(plan, tools, sources: Sequence[str], cores: int, cached: int = 0) -> Preview:
    """The estimate block; `cached`: the units the object cache serves besides `sources`."""
    archs = tools.archs
    machine = _schedule.Machine(
        tools.jobs, tools.nvcc_threads or 1, cores, len(archs.targets) if archs else 1
    )
    costs = plan.flavour.costs(plan)
    cost = costs.seconds if costs else None
    seconds = _schedule.predict(sources, machine, cost) if cost else None
    n = machine.archs
    lines = [
        f"about to compile {len(sources)} source(s) x {n} architecture{'s' * (n != 1)}"
        f" (kernel set {plan.flavour.kernel_set_name(plan)})",
    ]
    if archs:
        lines.append(
            f"  architectures: {', '.join(archs.selection.archs)} from {archs.selection.source}"
            f" -> sm_{', sm_'.join(archs.targets)}"
            + (
                ""
                if archs.selection.source.startswith(("setting", "the visible"))
                else " (set -C cuda-archs=... to build for your GPU only)"
            )
        )
    lines.append(
        f"  jobs: {machine.jobs} compile job(s) x {machine.threads} nvcc thread(s) on "
        f"{cores} core(s)"
    )
    if seconds is None:
        dist = plan.flavour.names.dist
        lines.append(f"  estimate: none for {dist} (fa-shim has no cost model for its sources)")
    else:
        of = f"{cached} of {cached + len(sources)} units cached, " if cached else ""
        lines.append(
            f"  estimate: {_schedule.time_range(seconds)} ({of}a per-source cost model "
            "calibrated on measured builds: docs/benchmarks.md)"
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > cores:  # others' work shares the cores: the model assumes them free
        lines.append(
            f"  note: this machine is busy (load average {load:.1f} on {cores} core(s)); "
            "the estimate assumes the cores are free"
        )
    if seconds is not None and seconds > SUGGEST_ABOVE_SECONDS and costs.faster:
        for alt, setting in costs.faster(tools, sources, machine):
            lines.append(f"  faster: {setting}: {_schedule.time_range(alt)}")
    return Preview(seconds, tuple(lines), machine, cost or _schedule.uniform)
