"""The translation units hopper/setup.py compiles for a set, known before anything is extracted
(check() refuses a build.ninja that differs). Forward units come in three forms (release.toml's
`forward-units`): `aggregate` (v2.8.3's `hdimall`, `hdimdiff`), `split` (the per-head-dim files
those include, each a unit: an aggregate peaked at 17-22 GiB, issue 24; one compiled away by
the set's switches is left out) and `per-head-dim` (upstream main). docs/fa3-design.md.
"""

from __future__ import annotations

import fnmatch
import itertools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ._kernels import ENV_PREFIX

if TYPE_CHECKING:
    from ._kernels import Fa3Tailoring
    from ._releases import Fa3Release

HEAD_DIMS = ("64", "96", "128", "192", "256")
DIFF64 = ("64_256", "64_512")  # Q/K head dim 64 with a larger V head dim
DIFF192 = ("192_128",)
DIFF_SWITCHES = ("HDIMDIFF64", "HDIMDIFF192")
SCHEDULER = "flash_prepare_scheduler.cu"
COMBINE = "flash_fwd_combine.cu"  # the split-KV combine step, with SPLIT


def api_source(release: Fa3Release) -> str:
    """The C++ API unit: the stable-ABI one (flash_api_stable.cpp) for a stable line, which
    fa-shim builds only under a torch it serves, else the torch-bound flash_api.cpp."""
    return "flash_api_stable.cpp" if release.stable else "flash_api.cpp"


def _forward(hdims, dtypes, on) -> list[str]:
    split = [""] + (["_split"] if on("SPLIT") else [])
    paged = [""] + (["_paged"] if on("PAGEDKV") else [])
    softcap = [""] + (["_softcap"] if on("SOFTCAP") else [])
    packgqa = [""] + (["_packgqa"] if on("PACKGQA") else [])
    return [
        f"flash_fwd_hdim{h}_{d}{p}{s}{c}{g}_sm90.cu"
        for h, d, s, p, c, g in itertools.product(hdims, dtypes, split, paged, softcap, packgqa)
        if not (g and (p or s))
    ]


def planned(release: Fa3Release, tailoring: Fa3Tailoring) -> list[str]:
    """Every unit setup.py compiles for this set, sm_90a only (fa-shim turns SM80 off), by
    basename: the API unit, the forward kernels, the backward kernels, the helpers."""
    off = switches_on(tailoring.env, ENV_PREFIX)

    def on(switch: str) -> bool:
        return switch not in off

    half = ["bf16"] + (["fp16"] if on("FP16") else [])
    dtypes = [*half, *(["e4m3"] if on("FP8") else [])]
    hdims = [h for h in HEAD_DIMS if on(f"HDIM{h}")]
    if release.forward_units == "aggregate":
        forward = _forward(["all", "diff"], dtypes, on)
    else:
        forward = _forward(hdims, dtypes, on)
        # upstream main lists the pairs by their HDIMDIFF switches; v2.8.3's split aggregates
        # include them, each file under its Q/K head dim's own switch
        diff64, diff192 = ("HDIM64", "HDIM192") if release.split_aggregates else DIFF_SWITCHES
        forward += _forward(DIFF64, half, on) if on(diff64) else []
        forward += _forward(DIFF192, dtypes, on) if on(diff192) else []
    softcap_all = ["_softcapall"] if on("SOFTCAP") else [""]
    backward = [
        f"flash_bwd_hdim{h}_{d}{c}_sm90.cu"
        for h, d, c in itertools.product(hdims, half, softcap_all)
        if on("BACKWARD")
    ]
    helpers = ([COMBINE] if on("SPLIT") else []) + [SCHEDULER]
    return [api_source(release), *forward, *backward, *helpers]


# ------------------------------------------------------------------ split aggregates

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
