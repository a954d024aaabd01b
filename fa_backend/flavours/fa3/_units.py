"""The units (translation units) hopper/setup.py compiles for a set, known before anything is
extracted: what the estimate, the memory plan and the disk check count, and what check() then
finds build.ninja compiling (a difference is refused: fa-shim's reading of setup.py is stale).

setup.py lists them as products of its switches (a `_split`, `_paged`, `_softcap`, `_packgqa`
variant per feature left on; PackGQA is never compiled beside paged or split). Its forward units
come in two forms (release.toml's `forward-units`): `aggregate` (v2.8.3: `hdimall`, every head
dim of a dtype and variant in one unit, and `hdimdiff`, the unequal Q/K and V head dims) and
`per-head-dim` (upstream main: one unit per head dim, plus `hdim64_256`, `hdim64_512` for
bf16/fp16 and `hdim192_128`, each behind its HDIMDIFF switch).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from ._kernels import ENV_PREFIX

if TYPE_CHECKING:
    from ._kernels import Fa3Tailoring
    from ._releases import Fa3Release

HEAD_DIMS = ("64", "96", "128", "192", "256")
DIFF64 = ("64_256", "64_512")  # Q/K head dim 64 with a larger V head dim
DIFF192 = ("192_128",)
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
    off = {name.removeprefix(ENV_PREFIX) for name, value in tailoring.env if value == "TRUE"}

    def on(switch: str) -> bool:
        return switch not in off

    half = ["bf16"] + (["fp16"] if on("FP16") else [])
    dtypes = [*half, *(["e4m3"] if on("FP8") else [])]
    hdims = [h for h in HEAD_DIMS if on(f"HDIM{h}")]
    if release.forward_units == "aggregate":
        forward = _forward(["all", "diff"], dtypes, on)
    else:
        forward = _forward(hdims, dtypes, on)
        forward += _forward(DIFF64, half, on) if on("HDIMDIFF64") else []
        forward += _forward(DIFF192, dtypes, on) if on("HDIMDIFF192") else []
    softcap_all = ["_softcapall"] if on("SOFTCAP") else [""]
    backward = [
        f"flash_bwd_hdim{h}_{d}{c}_sm90.cu"
        for h, d, c in itertools.product(hdims, half, softcap_all)
        if on("BACKWARD")
    ]
    helpers = ([COMBINE] if on("SPLIT") else []) + [SCHEDULER]
    return [api_source(release), *forward, *backward, *helpers]
