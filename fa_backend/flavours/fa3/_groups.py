"""Forward variants compiled together: the per-head-dim forward files of one head dim and dtype
(`_split`, `_paged`, `_softcap`, `_packgqa` and their products) as fewer units, each a file that
`#include`s its members. They share their head dim's CUTLASS templates: two in one unit cost
1.25-1.45 x one, four 2.1 x, at 0.3-0.4 GiB more each (docs/benchmarks.md#build-time); head dims
share little. `flash_fwd_hdim128_bf16_group2of3x4_sm90.cu`: the second of three groups of head
dim 128 bf16, four variants in it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from .. import api
from ._units import DIFF64

# Q/K head dim 64 with V 256 or 512: five of these variants in one unit ran past 1,618 s on the
# H200 box, where apart they take 270-330 s each (lease j): compiled as upstream cuts them
NEVER_GROUPED = DIFF64

# a per-head-dim forward file: flash_fwd_hdim<h>_<dtype><features>_sm90.cu
_MEMBER = re.compile(r"flash_fwd_hdim(?P<hdim>\d+(?:_\d+)?)_(?P<dtype>bf16|fp16|e4m3)\w*_sm90\.cu")
_GROUP = re.compile(
    r"flash_fwd_hdim(?P<hdim>\d+(?:_\d+)?)_(?P<dtype>bf16|fp16|e4m3)"
    r"_group(?P<i>\d+)of(?P<k>\d+)x(?P<n>\d+)_sm90\.cu"
)
# variants per unit the model weighs: upstream's units, and the sizes measured (two on the 2-core
# box; five, half of a head dim's ten, in the full set on the H200 box)
SIZES = (1, 2, 5)


def variants(name: str) -> int:
    """How many forward variants a unit compiles: a group's count, else 1."""
    m = _GROUP.fullmatch(name)
    return int(m["n"]) if m else 1


def members(name: str, units: Sequence[str]) -> list[str]:
    """The files of setup.py's `units` a group compiles (a unit that is no group: itself)."""
    m = _GROUP.fullmatch(name)
    if not m:
        return [name]
    key = (m["hdim"], m["dtype"])
    same = [
        u for u in units if (u_m := _MEMBER.fullmatch(u)) and (u_m["hdim"], u_m["dtype"]) == key
    ]
    return same[int(m["i"]) - 1 :: int(m["k"])]


def layout(units: Sequence[str], size: int) -> dict[str, list[str]]:
    """{unit compiled: the files it holds}, in the units' order: each head dim and dtype's
    forward variants in balanced groups of at most `size`, every other unit as itself."""
    keys: dict[tuple[str, str], list[str]] = {}
    for name in units:
        m = _MEMBER.fullmatch(name)
        if m and not _GROUP.fullmatch(name) and m["hdim"] not in NEVER_GROUPED:
            keys.setdefault((m["hdim"], m["dtype"]), []).append(name)
    grouped: dict[str, list[str]] = {}
    placed: set[str] = set()
    for name in units:
        if name in placed:
            continue
        m = _MEMBER.fullmatch(name)
        members = keys.get((m["hdim"], m["dtype"]), []) if m else []
        if size <= 1 or len(members) <= 1:
            grouped[name] = [name]
            continue
        k = -(-len(members) // size)  # as few groups as the size allows, balanced
        for i in range(k):
            chunk = members[i::k]
            name = f"flash_fwd_hdim{m['hdim']}_{m['dtype']}_group{i + 1}of{k}x{len(chunk)}_sm90.cu"
            grouped[name] = chunk
        placed.update(members)
    return grouped


def best_size(
    units: Sequence[str],
    seconds: Callable[[str], float],
    peak: Callable[[str], int],
    jobs: int,
    memory: int,
) -> int:
    """Variants per unit whose modelled build ends first (the smaller where two tie)."""

    def end(size: int) -> float:
        names = list(layout(units, size))
        times = {n: seconds(n) for n in names}
        pools = api.plan_pools({n: peak(n) for n in names}, jobs, memory, times)
        order = sorted(times, key=lambda n: (-times[n], n))
        return api.simulate(order, times, pools.jobs, pools.pool_of, pools.depths)

    ends = {size: end(size) for size in SIZES}
    return min(ends, key=lambda s: (round(ends[s]), s))


def write(instantiations: Path, grouped: Mapping[str, Sequence[str]]) -> None:
    """Each group's file beside its members (whole, or not at all)."""
    for name, members in _only_groups(grouped):
        lines = [
            "// Written by fa-shim: forward variants of one head dim and dtype in one unit",
            "// (fa_backend/flavours/fa3/_groups.py); each file below as upstream has it.",
            *(f'#include "{member}"' for member in members),
        ]
        api.atomic_write(instantiations / name, ("\n".join(lines) + "\n").encode())


def replacing(grouped: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Upstream's source list's replacements: a group's first member for the group, the others
    for nothing."""
    out: dict[str, list[str]] = {}
    for name, members in _only_groups(grouped):
        out[members[0]] = [name]
        out.update({m: [] for m in members[1:]})
    return out


def _only_groups(grouped: Mapping[str, Sequence[str]]):
    """The layout's groups (a unit compiled as itself is none)."""
    return ((name, members) for name, members in grouped.items() if list(members) != [name])
