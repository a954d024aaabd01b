"""How long a build will take, before it starts: a per-translation-unit cost model.

Each source costs what one core took to compile it on the H100 machine of docs/benchmarks.md
(run3: fa-shim's full sm_90 build, 16 jobs on 16 cores, every core busy), averaged over fp16 and
bf16; `bench/estimate_check.py` derives the table from that run's records and compares the
model's predictions with every recorded build. The build's time is then the schedule of those
costs on its compile jobs (heaviest first, as fa-shim orders build.ninja), scaled by the
architectures (every arch repeats a source's device code; nvcc threads compile them side by
side) and by cores (jobs x threads beyond the cores share them), plus a fixed overhead.

The same model gives the ETA while compiling (`remaining`): work still running counts with what
it has left, and the costs are rescaled by how fast the finished sources really were.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import os
import re
from collections.abc import Iterable, Sequence

# (kind, head dim, causal) -> seconds for one arch (run3's full-tus.jsonl, fp16/bf16 mean)
KERNEL_SECONDS = {
    ("bwd", 32, False): 212, ("bwd", 32, True): 150,
    ("bwd", 64, False): 258, ("bwd", 64, True): 179,
    ("bwd", 96, False): 227, ("bwd", 96, True): 153,
    ("bwd", 128, False): 274, ("bwd", 128, True): 180,
    ("bwd", 192, False): 221, ("bwd", 192, True): 146,
    ("bwd", 256, False): 310, ("bwd", 256, True): 190,
    ("fwd", 32, False): 157, ("fwd", 32, True): 105,
    ("fwd", 64, False): 187, ("fwd", 64, True): 130,
    ("fwd", 96, False): 159, ("fwd", 96, True): 171,
    ("fwd", 128, False): 215, ("fwd", 128, True): 172,
    ("fwd", 192, False): 158, ("fwd", 192, True): 108,
    ("fwd", 256, False): 260, ("fwd", 256, True): 183,
    ("fwd_split", 32, False): 296, ("fwd_split", 32, True): 175,
    ("fwd_split", 64, False): 381, ("fwd_split", 64, True): 241,
    ("fwd_split", 96, False): 314, ("fwd_split", 96, True): 195,
    ("fwd_split", 128, False): 364, ("fwd_split", 128, True): 215,
    ("fwd_split", 192, False): 291, ("fwd_split", 192, True): 189,
    ("fwd_split", 256, False): 343, ("fwd_split", 256, True): 207,
}  # fmt: skip
OTHER_SECONDS = 36  # flash_api.cpp (36.5 s in run3) and any source the table does not name
# A source compiled in n parts (_tu_parts): part 0 keeps the dispatch, parts 1..n each re-parse
# the headers (tailored run3: part 0 20-28 s, a part ~50 s + its share of the kernels).
PART0_SECONDS = 23
PART_OVERHEAD_SECONDS = 50
# All five FLASHATTENTION_DISABLE_* switches: kernel work x 0.45 (tailored run3: 939 s against
# 1880 s of TU time); fewer switches are interpolated geometrically (not measured).
DISABLE_ALL_FACTOR = 0.45
N_SWITCHES = 5
# The share of a source's time that does not repeat per architecture (host code, front end):
# an assumption, consistent with the stock four-arch objects of run2 (docs/benchmarks.md).
HOST_SHARE = 0.2
OVERHEAD_SECONDS = 30  # torch facts, extraction, upstream's prepare, link, repack, verify
RANGE = (0.7, 1.3)  # the recorded builds fall within it but one (docs/benchmarks.md, "Estimates")

_KERNEL = re.compile(
    r"flash_(?P<kind>fwd_split|fwd|bwd)_hdim(?P<hdim>\d+)_(?:fp16|bf16)(?P<causal>_causal)?"
    r"_sm\d+(?:\.part(?P<k>\d+)of(?P<n>\d+))?\.cu$"
)
_HDIMS = sorted({h for _, h, _ in KERNEL_SECONDS})


def source_seconds(name: str, disabled: int = 0) -> float:
    """One arch, one core: what the model says this source (a basename) costs."""
    m = _KERNEL.search(name)
    if not m:
        return OTHER_SECONDS
    hdim = min(_HDIMS, key=lambda h: abs(h - int(m["hdim"])))  # 2.6's 160/224: the nearest
    seconds = KERNEL_SECONDS[(m["kind"], hdim, bool(m["causal"]))]
    if m["n"]:
        if int(m["k"]) == 0:
            return PART0_SECONDS
        seconds = PART_OVERHEAD_SECONDS + seconds / int(m["n"])
    return seconds * DISABLE_ALL_FACTOR ** (min(disabled, N_SWITCHES) / N_SWITCHES)


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


def predict(sources: Sequence[str], machine: Machine, disabled: int = 0) -> float:
    """Seconds for the whole build of these sources (basenames), overhead included."""
    durations = [machine.scale(source_seconds(s, disabled)) for s in sources]
    return OVERHEAD_SECONDS + makespan(durations, machine.jobs)


def remaining(
    pending: Sequence[str],
    running: Sequence[tuple[str, float]],
    finished: Sequence[tuple[str, float]],
    machine: Machine,
    disabled: int = 0,
) -> float:
    """Seconds until the last source is compiled: `running` are (name, seconds so far),
    `finished` (name, seconds it took). The model's costs are rescaled by the finished ones."""

    def model(name: str) -> float:
        return machine.scale(source_seconds(name, disabled))

    predicted = sum(model(name) for name, _ in finished)
    rate = sum(s for _, s in finished) / predicted if finished and predicted else 1.0
    busy = []
    for name, elapsed in running:
        expected = model(name) * rate
        # past its expected time it is slower than thought: assume a tenth more, never zero
        busy.append(max(expected - elapsed, 0.1 * max(elapsed, expected)))
    return makespan([model(name) * rate for name in pending], machine.jobs, busy)


def time_range(seconds: float) -> str:
    """The estimate as the range the recorded builds fell in: '8-13 min', '2.1-3.4 h'."""
    low, high = (seconds * f for f in RANGE)
    if high < 90:
        return f"{max(1, round(low / 10) * 10)}-{math.ceil(high / 10) * 10} s"
    if high < 2 * 3600:
        return f"{max(1, round(low / 60))}-{max(2, math.ceil(high / 60))} min"
    return f"{low / 3600:.1f}-{high / 3600:.1f} h"


# --------------------------------------------------------------------- the block before the wait

SUGGEST_ABOVE_SECONDS = 30 * 60
INFERENCE_SET = {"head_dims": ("128",), "dtypes": ("bf16",), "forward_only": True}
ALL_SWITCHES = "dropout,alibi,softcap,local,uneven_k"


@dataclasses.dataclass(frozen=True)
class Preview:
    seconds: float
    lines: tuple[str, ...]  # the block, without the "fa-shim: " prefix
    machine: Machine
    disabled: int


def build_sources(commands) -> list[str]:
    """The sources a prepared build compiles (basenames of build.ninja's commands)."""
    return [c.file.rsplit("/", 1)[-1] for c in commands]


def planned_sources(plan, tools, tailoring=None) -> list[str] | None:
    """The sources a build would compile, before anything is extracted: the kernel set's
    sources cut into parts as the build would, plus flash_api.cpp; None for a version whose
    kernel layout fa-shim does not know."""
    from ..flavours.fa2 import _kernels, _releases, _tu_parts

    version = plan.sdist.version
    release = _releases.release(version)
    if not release.kernels:
        return None
    kernels = sorted(_kernels.expected_kernels(tailoring or plan.tailoring, version))
    parts = tools.tu_parts
    if tailoring is not None:  # another set: as many parts as its idle jobs allow
        parts = _tu_parts.choose(plan.settings.tu_parts, tools.jobs, kernels, release.tu_parts)
    names = []
    for kernel in kernels:
        split = parts > 1 and _tu_parts.splittable(kernel)
        names += _tu_parts.part_names(kernel, parts) if split else [kernel]
    return [*names, "flash_api.cpp"]


def _one_arch(plan, machine: Machine, n_sources: int) -> Machine:
    """The machine a one-architecture build would get: jobs and threads sized again."""
    from ..toolchain import _jobs

    s = plan.settings
    jobs, threads = _jobs.plan_jobs(
        machine.cores, _jobs.available_memory(), 1, s.max_jobs, s.nvcc_threads, n_sources
    )
    return Machine(jobs, threads, machine.cores, 1)


def _suggestions(plan, tools, sources, machine, disabled) -> list[tuple[float, str]]:
    from ..flavours.fa2 import _kernels, _releases

    options = []
    if tools.archs and len(tools.archs.targets) > 1:
        one = "90" if "90" in tools.archs.targets else tools.archs.targets[-1]
        options.append(
            (
                predict(sources, _one_arch(plan, machine, len(sources)), disabled),
                f"-C cuda-archs={one} (only the GPU you run on: 80 A100/RTX 30-40, 90 H100)",
            )
        )
    if _releases.release(plan.sdist.version).kernels:
        if plan.tailoring.full:
            settings = dataclasses.replace(plan.settings, **INFERENCE_SET)
            tailored = _kernels.tailoring(settings, plan.sdist.version)
            alt = planned_sources(plan, tools, tailored) or sources
            options.append(
                (
                    predict(alt, machine, disabled),
                    "-C head-dims=128 -C dtypes=bf16 -C forward-only=true (a tailored set: "
                    "README, Build speed)",
                )
            )
        if disabled < N_SWITCHES:
            options.append((predict(sources, machine, N_SWITCHES), f"-C disable={ALL_SWITCHES}"))
    return sorted(options)[:3]


def _set_name(plan) -> str:
    return plan.kernel_set["label"] if plan.fa3 else plan.tailoring.kernel_set


def preview(plan, tools, sources: Sequence[str], cores: int) -> Preview:
    """The short block printed before compiling (and by doctor)."""
    archs = tools.archs
    machine = Machine(
        tools.jobs, tools.nvcc_threads or 1, cores, len(archs.targets) if archs else 1
    )
    disabled = len(plan.tailoring.disabled)
    seconds = predict(sources, machine, disabled)
    n = machine.archs
    lines = [
        f"about to compile {len(sources)} source(s) x {n} architecture{'s' * (n != 1)}"
        f" (kernel set {_set_name(plan)})",
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
    if plan.fa3:  # the cost model knows FA2's sources; FA3's are measured, not modelled
        lines.append(
            "  estimate: none for FlashAttention-3 (measured: a tailored set about 2.5 min on "
            "16 cores, the full set hours: docs/benchmarks.md)"
        )
    else:
        lines.append(
            f"  estimate: {time_range(seconds)} (a per-source cost model calibrated on measured "
            "builds: docs/benchmarks.md)"
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > cores:  # others' work shares the cores: the model assumes them free
        lines.append(
            f"  note: this machine is busy (load average {load:.1f} on {cores} core(s)); "
            "the estimate assumes the cores are free"
        )
    if seconds > SUGGEST_ABOVE_SECONDS and not plan.fa3:  # the suggestions are FA2's sets
        for alt, setting in _suggestions(plan, tools, sources, machine, disabled):
            lines.append(f"  faster: {setting}: {time_range(alt)}")
    return Preview(seconds, tuple(lines), machine, disabled)
