"""FlashAttention-3's forward units as the files upstream's aggregates include (issue 24).

v2.8.3's hopper/setup.py compiles the forward kernels as aggregates: each
`flash_fwd_hdimall_<dtype><features>_sm90.cu` `#include`s the five per-head-dim files, each
`flash_fwd_hdimdiff_*` the head-dim pairs. One aggregate peaked at 17-22 GiB and took over 15
minutes on the H100; the files it includes peak at 6-7 GiB and take 2.5-3 minutes each
(docs/benchmarks.md). Where the release registry says `split-aggregates = true`, the driver
compiles the included files instead (its `split_sources`: the same rule and flags, only the
file differs). An included file whose every line sits under `#ifndef FLASHATTENTION_DISABLE_X`
for a switch the set turns on compiles to nothing, so it is left out: a tailored set keeps the
files of its own head dims, as upstream's DISABLE switches select them.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from pathlib import Path

INSTANTIATIONS = "instantiations"  # hopper/'s kernel files
AGGREGATES = ("flash_fwd_hdimall_*_sm90.cu", "flash_fwd_hdimdiff_*_sm90.cu")
_INCLUDE = re.compile(r'^\s*#include\s+"([^"/]+\.cu)"\s*$', re.M)
_GUARD = re.compile(r"^\s*#ifndef\s+FLASHATTENTION_DISABLE_(\w+)\s*$", re.M)
# a line outside every #if block that is not a comment, an include or blank: real code
_CODE = re.compile(r"^(?!\s*(//|#include|$))", re.M)


def is_aggregate(name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in AGGREGATES)


def _compiled_away(text: str, off: set[str]) -> bool:
    """Whether a per-head-dim file is empty under these switches: all its code within one
    `#ifndef FLASHATTENTION_DISABLE_<X>` ... `#endif` whose X is on."""
    guards = _GUARD.findall(text)
    if len(guards) != 1 or guards[0] not in off:
        return False
    head, _, rest = text.partition(f"#ifndef FLASHATTENTION_DISABLE_{guards[0]}")
    _, _, tail = rest.rpartition("#endif")
    return not (_CODE.search(head) or _CODE.search(tail))


def split_sources(hopper: Path, off: Iterable[str]) -> dict[str, list[str]]:
    """{aggregate: the files it includes that this set compiles} for every aggregate of the
    tree (the driver expands those setup.py lists; an empty list drops the aggregate)."""
    off = set(off)
    directory = hopper / INSTANTIATIONS
    split = {}
    for path in sorted(directory.glob("flash_fwd_hdim*_sm90.cu")):
        if not is_aggregate(path.name):
            continue
        included = _INCLUDE.findall(path.read_text(encoding="utf-8"))
        if included:
            split[path.name] = [
                name
                for name in included
                if not _compiled_away((directory / name).read_text(encoding="utf-8"), off)
            ]
    return split


def switches_on(env: Iterable[tuple[str, str]], prefix: str) -> set[str]:
    """The DISABLE switches a set turns on ({"HDIM64", "FP8", ...}) from its environment."""
    return {name[len(prefix) :] for name, value in env if value == "TRUE"}
