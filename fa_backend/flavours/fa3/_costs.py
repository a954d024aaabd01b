"""FlashAttention-3's cost and memory models: what each unit (a basename, _units) takes to compile
for sm_90a on one core, and its compiler's peak memory, from the measured builds that
docs/fa3-design.md#per-head-dim-units-their-cost-and-memory lists (on the H100 unless said).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .. import api
from ..api import FaShimError
from . import _groups, _units
from ._units import COMBINE, DIFF64, DIFF192, SCHEDULER, Fa3Tailoring

if TYPE_CHECKING:
    from ..api import Plan

GIB = 1024**3
# one core, every feature compiled (16 jobs on 16 cores)
BWD_SECONDS = {"64": 270, "96": 247, "128": 256, "192": 236, "256": 241}  # bf16/fp16 mean
FWD_SECONDS = 210  # a per-head-dim forward unit: the 16-way slice's middle (181-234 s)
PAIR_SECONDS = 255  # a head-dim pair unit: 22 measured at 16 jobs, 193-326 s (lease f)
DIFF_SECONDS_PER_PAIR = 180  # v2.8.3's hdimdiff: 497 s for three pairs, 7 at once, + contention
HDIMALL_SECONDS_PER_HDIM = 190  # hdimall: 955 s for five head dims (bf16)
OTHER_SECONDS = {"flash_api.cpp": 40, "flash_api_stable.cpp": 20, SCHEDULER: 35, COMBINE: 60}
DEFAULT_SECONDS = 60
# a group of n forward variants: the first as one unit, each other this share of it (groups of
# five 1.8-2.3 x one, lease j), and this much more memory each (0.15-0.47 GiB in lease j)
GROUP_SHARE = 0.3
GROUP_PEAK_PER_VARIANT = 0.5 * GIB
# the switches that shrink a unit rather than drop it; all five off: x 0.5 (H100: backward
# hdim128 119 s of 256 s, hdimall at one head dim about 100 s of 190 s), fewer geometrically
IN_UNIT = ("local", "varlen", "appendkv", "cluster", "softcap")
DISABLE_ALL_FACTOR = 0.5
# peak memory of one unit's compiler (not scaled down for a tailored set: an OOM costs more);
# a unit its line's units.json has takes its measured figure instead (memory_model)
FWD_PEAK = 7.25 * GIB  # 7.11 GiB measured at most
PAIR_PEAK = 7.5 * GIB  # 7.46 GiB
BWD_PEAK = 6.5 * GIB  # 6.49 GiB (lease f; 6.41 before)
AGGREGATE_PEAK_PER_HDIM = 4.5 * GIB  # hdimall 22.0 GiB for five, hdimdiff 13.2 GiB for three pairs
AGGREGATE_MIN_PEAK = 6 * GIB  # one head dim (or none) still parses the launch templates
OTHER_PEAK = {
    "flash_api.cpp": 1.6 * GIB,
    "flash_api_stable.cpp": 0.6 * GIB,
    SCHEDULER: 1.3 * GIB,
    COMBINE: 2.0 * GIB,
}
DEFAULT_PEAK = 6 * GIB
_UNIT = re.compile(r"flash_(?P<kind>fwd|bwd)_hdim(?P<hdim>\d+(?:_\d+)?|all|diff)_")


def _aggregate_width(hdim: str, tailoring: Fa3Tailoring) -> int:
    """How many head dims (hdimall) or head-dim pairs (hdimdiff) a v2.8.3 unit compiles."""
    if hdim == "all":
        return len(tailoring.head_dims)
    return sum(pair.split("_")[0] in tailoring.head_dims for pair in (*DIFF64, *DIFF192))


def unit_seconds(name: str, tailoring: Fa3Tailoring) -> float:
    """One core, sm_90a: what the model says this unit costs."""
    m = _UNIT.match(name)
    if not m:
        return OTHER_SECONDS.get(name, DEFAULT_SECONDS)
    kind, hdim = m["kind"], m["hdim"]
    if kind == "bwd":
        seconds = BWD_SECONDS.get(hdim, max(BWD_SECONDS.values()))
    elif hdim in ("all", "diff"):
        per = HDIMALL_SECONDS_PER_HDIM if hdim == "all" else DIFF_SECONDS_PER_PAIR
        seconds = max(OTHER_SECONDS[SCHEDULER], per * _aggregate_width(hdim, tailoring))
    else:
        seconds = PAIR_SECONDS if "_" in hdim else FWD_SECONDS
        seconds *= 1 + GROUP_SHARE * (_groups.variants(name) - 1)
    off = sum(feature in tailoring.disabled for feature in IN_UNIT)
    return seconds * DISABLE_ALL_FACTOR ** (off / len(IN_UNIT))


def unit_peak(name: str, tailoring: Fa3Tailoring) -> int:
    """Peak bytes of this unit's compiler, erring high."""
    m = _UNIT.match(name)
    if not m:
        return int(OTHER_PEAK.get(name, DEFAULT_PEAK))
    if m["hdim"] in ("all", "diff"):
        width = _aggregate_width(m["hdim"], tailoring)
        return int(max(AGGREGATE_MIN_PEAK, AGGREGATE_PEAK_PER_HDIM * width))
    if m["kind"] == "bwd":
        return int(BWD_PEAK)
    return int(PAIR_PEAK if "_" in m["hdim"] else FWD_PEAK) + _group_extra(name)


def _group_extra(name: str) -> int:
    """What a group holds beyond one of its variants."""
    return int(GROUP_PEAK_PER_VARIANT * (_groups.variants(name) - 1))


def cost_model(tailoring: Fa3Tailoring) -> Callable[[str], float]:
    return lambda name: unit_seconds(name, tailoring)


def memory_model(
    tailoring: Fa3Tailoring,
    table: api.UnitTable | None = None,
    units: Sequence[str] = (),
) -> Callable[[str], int]:
    """Each unit's peak: its line's units.json figure (full-set builds: switches turned off hold
    no more), else unit_peak's; a group the table lacks as its heaviest member of `units` and
    GROUP_PEAK_PER_VARIANT for each other."""

    def peak(name: str) -> int:
        measured = table.peak_bytes(name) if table else None
        if measured:
            return measured
        members = _groups.members(name, units)
        if len(members) > 1:
            return max(map(peak, members)) + _group_extra(name)
        return unit_peak(name, tailoring)

    return peak


# what faster_options proposes for a long build: a training set, varlen kept
TRAINING_SET = {
    "head_dims": ("128",),
    "dtypes": ("bf16",),
    "disable": ("fp8", "split", "pagedkv", "appendkv", "local", "softcap", "packgqa", "cluster"),
}
TRAINING_OPTIONS = (
    "-C head-dims=128 -C dtypes=bf16 "
    "-C disable=fp8,split,paged-kv,appendkv,local,softcap,packgqa,cluster"
)


def faster_options(
    plan: Plan, sources: Sequence[str], machine: api.Machine
) -> list[tuple[float, str]]:
    """The tailored training set with its predicted seconds, for a set larger than it."""
    settings = dataclasses.replace(plan.settings, **TRAINING_SET)
    known = tuple(n.removeprefix(_units.ENV_PREFIX) for n, _ in plan.source.tailoring.env)
    try:
        tailored = _units.tailoring(settings, known)
    except FaShimError:  # a line without one of those switches
        return []
    units = _units.planned(plan.source.release, tailored)
    if len(units) >= len(sources):
        return []
    seconds = api.predict(units, machine, cost_model(tailored))
    return [(seconds, f"{TRAINING_OPTIONS} (docs/guides/flash-attn-3.md#tailored-sets)")]
