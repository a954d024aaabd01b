"""FlashAttention-2's cost model: what one core took to compile each kernel source on the H100 of
docs/benchmarks.md (run3: the full sm_90 build, 16 jobs on 16 cores), fp16/bf16 averaged;
`bench/estimate_check.py` derives the table and checks the model against every recorded build.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence

from .. import api
from ..api import VENDORED
from . import _kernels, _releases, _tu_parts

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
# A source compiled in n parts (_tu_parts): part 0 keeps the dispatch (and a split-KV source's
# combine kernels), parts 1..n each re-parse the headers (tailored run3: part 0 17-22 s, 23-28 s
# with the combine kernels, a part ~50 s + its share of the kernels).
PART0_SECONDS = {"fwd_split": 26}
PART0_OTHER_SECONDS = 20
PART_OVERHEAD_SECONDS = 50
# All five FLASHATTENTION_DISABLE_* switches: a source's time x 0.25 (whole sources on the H100,
# 2026-11-25: 60-87 s with four against run3's 172-364 s); fewer: geometrically (not measured).
DISABLE_ALL_FACTOR = 0.25
N_SWITCHES = 5
# With the switches on, a part costs about what its whole source does (H100, 2026-11-25, 4
# switches: each half 61-86 s against 60-87 s whole): a part's cost moves linearly from the model
# above (no switch) to the whole source's at PART_AS_WHOLE_SWITCHES switches.
PART_AS_WHOLE_SWITCHES = 4
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
    factor = DISABLE_ALL_FACTOR ** (min(disabled, N_SWITCHES) / N_SWITCHES)
    if not m["n"]:
        return seconds * factor
    if int(m["k"]) == 0:
        return PART0_SECONDS.get(m["kind"], PART0_OTHER_SECONDS)
    part = (PART_OVERHEAD_SECONDS + seconds / int(m["n"])) * factor
    whole = seconds * factor
    share = min(disabled, PART_AS_WHOLE_SWITCHES) / PART_AS_WHOLE_SWITCHES
    return part + max(0.0, whole - part) * share


def model(disabled: int) -> api.Cost:
    """The cost of each source of a set built with `disabled` DISABLE switches."""
    return lambda name: source_seconds(name, disabled)


def memory_model(version: str, pinned: bool) -> Callable[[str], int] | None:
    """Each source's peak bytes (one arch) from the release's units.json (or its unit-table's); a
    part as its whole source (it never holds more), else toolchain/_jobs' figure. None: no table."""
    if not pinned:
        return None
    table = api.load_units(VENDORED / (_releases.release(version).unit_table or version))
    if table is None:
        return None
    return lambda name: table.peak_bytes(name, _tu_parts.source_of(name)) or api.JOB_BYTES_ONE_ARCH


# --------------------------------------------------------------- sets a long build could take
INFERENCE_SET = {"head_dims": ("128",), "dtypes": ("bf16",), "forward_only": True}
INFERENCE_OPTIONS = (
    "-C head-dims=128 -C dtypes=bf16 -C forward-only=true (a tailored set: "
    "docs/guides/build-speed.md#tailored-kernel-sets)"
)
ALL_SWITCHES = "dropout,alibi,softcap,local,uneven_k"
NEAR_TIE = 1.03  # model differences this small are noise: keep the idle-jobs rule's count


def best_parts(
    setting: int | None, jobs: int, cores: int, kernels, patched: bool, disabled: int
) -> int:
    """Parts per kernel source: the setting, else the count whose modelled build on `jobs` jobs
    ends first, or the idle-jobs rule's count within NEAR_TIE of it (each part re-parses the
    headers: a forward + backward set on 16 jobs is fastest in 4 parts, the rule gives 2)."""
    rule = _tu_parts.choose(setting, jobs, kernels, patched)
    if setting is not None or not patched or not kernels:
        return rule
    machine, cost = api.Machine(jobs, 1, cores, 1), model(disabled)
    times = {
        n: api.predict([*_tu_parts.split_names(sorted(kernels), n), "flash_api.cpp"], machine, cost)
        for n in range(1, _tu_parts.MAX_PARTS + 1)
    }
    best = min(times, key=lambda n: (times[n], n))
    # the rule's count where the model barely differs, unless splitting gains nothing at all
    keep_rule = times[rule] <= times[best] * NEAR_TIE and times[rule] < times[1]
    return rule if keep_rule else best


def cut_sources(kernels: Sequence[str], whole: int) -> frozenset[str]:
    """The splittable sources compiled in parts: all but the `whole` the model says take least
    time (ties by name; the DISABLE switches scale every source alike)."""
    ranked = sorted(
        (k for k in kernels if _tu_parts.splittable(k)), key=lambda k: (-source_seconds(k), k)
    )
    return frozenset(ranked[: max(0, len(ranked) - whole)])


def best_split(
    setting: int | None, jobs: int, cores: int, kernels, patched: bool, disabled: int
) -> tuple[int, int]:
    """(parts, how many splittable sources stay whole, the shortest). A tailored set takes
    best_parts' count for each; a larger one whose longest unit outlasts the work per job (the
    full set on 64 cores) cuts its longest sources as the model finds fastest, where that gains
    more than NEAR_TIE."""
    parts = best_parts(setting, jobs, cores, kernels, patched, disabled)
    if setting is not None or not patched or not kernels:
        return parts, 0
    if _tu_parts.choose(None, jobs, kernels, patched) > 1:
        return parts, 0  # idle jobs for every source: tailored sets split them all
    cost = model(disabled)
    seconds = {k: cost(k) for k in [*kernels, "flash_api.cpp"]}
    if max(seconds.values()) <= sum(seconds.values()) / jobs:
        return parts, 0  # every job stays busy past the longest unit: parts add work, not speed
    ranked = sorted(cut_sources(kernels, 0), key=lambda k: (-seconds[k], k))
    others = [t for k, t in seconds.items() if k not in set(ranked)]
    whole = [seconds[k] for k in ranked]

    def in_parts(k: str, n: int) -> list[float]:  # part 0, then n parts that cost alike
        part0, part1 = _tu_parts.part_names(k, n)[:2]
        return [cost(part0), *[cost(part1)] * n]

    part_seconds = {n: [in_parts(k, n) for k in ranked] for n in range(2, _tu_parts.MAX_PARTS + 1)}

    def predicted(n: int, count: int) -> float:  # the `count` longest in n parts
        cut = [t for times in part_seconds[n][:count] for t in times]
        return api.makespan(others + whole[count:] + cut, jobs)

    best = (math.inf, 0, 0, 0)
    for n in range(2, _tu_parts.MAX_PARTS + 1):
        work = sum(seconds.values())
        for count in range(1, len(ranked) + 1):
            work += sum(part_seconds[n][count - 1]) - whole[count - 1]
            if work / jobs >= best[0]:
                break  # each source cut adds work: no later count ends sooner
            best = min(best, (predicted(n, count), count * n, n, count))
    best_seconds, _, n, count = best
    chosen = predicted(parts, len(ranked)) if parts > 1 else api.makespan(seconds.values(), jobs)
    if best_seconds * NEAR_TIE >= chosen:
        return parts, 0
    return n, len(ranked) - count


def planned_sources(source, tu_parts: int, whole: int = 0) -> list[str] | None:
    """The sources a build would compile, before anything is extracted: the set's, cut into parts
    (all but the `whole` shortest), and flash_api.cpp; None: a layout fa-shim does not know."""
    kernels = source.kernels
    if kernels is None:
        return None
    return [*_tu_parts.split_names(kernels, tu_parts, cut_sources(kernels, whole)), "flash_api.cpp"]


def faster_options(
    plan, tools, sources: Sequence[str], machine: api.Machine
) -> list[tuple[float, str]]:
    """Up to three settings that shorten a long build, fastest first, each with its seconds."""
    source = plan.source
    disabled = len(source.tailoring.disabled)
    cost = model(disabled)
    options = []
    if tools.archs and len(tools.archs.targets) > 1:
        one = "90" if "90" in tools.archs.targets else tools.archs.targets[-1]
        s = plan.settings  # a one-architecture build: its jobs and threads sized again
        jobs, threads = api.plan_jobs(
            machine.cores, api.available_memory(), 1, s.max_jobs, s.nvcc_threads, len(sources)
        )
        one_arch = api.Machine(jobs, threads, machine.cores, 1)
        seconds = api.predict(sources, one_arch, cost)
        why = "only the GPU you run on: 80 A100/RTX 30-40, 90 H100"
        options.append((seconds, f"-C cuda-archs={one} ({why})"))
    release = source.release
    if release.kernels:
        if source.tailoring.full:
            settings = dataclasses.replace(plan.settings, **INFERENCE_SET)
            alt = dataclasses.replace(
                source, tailoring=_kernels.tailoring(settings, source.sdist.version)
            )
            # another set: the parts the model finds fastest for its idle jobs
            parts, whole = best_split(
                settings.tu_parts,
                tools.jobs,
                machine.cores,
                alt.kernels,
                release.tu_parts,
                len(alt.tailoring.disabled),
            )
            seconds = api.predict(planned_sources(alt, parts, whole), machine, cost)
            options.append((seconds, INFERENCE_OPTIONS))
        if disabled < N_SWITCHES:
            seconds = api.predict(sources, machine, model(N_SWITCHES))
            options.append((seconds, f"-C disable={ALL_SWITCHES}"))
    return sorted(options)[:3]
