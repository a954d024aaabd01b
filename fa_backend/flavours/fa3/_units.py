"""A FlashAttention-3 kernel set and the units it compiles. fa-shim's settings become upstream's
FLASH_ATTENTION_DISABLE_*, which hopper/setup.py reads from its environment (the switches a version
knows are parsed from it): a set is that environment, every switch said TRUE or FALSE. `head-dims`,
`dtypes` and `forward-only` own the HDIM<n>/HDIMDIFF<n>, FP16 and BACKWARD switches, the arch choice
owns SM80; `disable` takes the rest (docs/fa3-design.md).

The translation units hopper/setup.py compiles for a set are known before anything is extracted
(check() refuses a build.ninja that differs). Forward units come in three forms (release.toml's
`forward-units`): `aggregate` (v2.8.3's `hdimall`, `hdimdiff`), `split` (the per-head-dim files
those include, each a unit: an aggregate peaked at 17-22 GiB, issue 24; one compiled away by
the set's switches is left out) and `per-head-dim` (upstream main).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from .. import api
from ..api import FaShimError

if TYPE_CHECKING:
    from ..api import Settings
    from ._releases import Fa3Release

ENV_PREFIX = "FLASH_ATTENTION_DISABLE_"
_SWITCH = re.compile(r"""os\.getenv\(\s*["']FLASH_ATTENTION_DISABLE_(\w+)["']""")
_HDIM = re.compile(r"HDIM(\d+)")
# upstream main's unequal head-dim kernels: Q/K 64 with V 256/512 (HDIMDIFF64), Q/K 192 with V
# 128 (HDIMDIFF192); head-dims keeps them with their Q/K head dim (the V one needs no unit of its
# own), so a set without 64 compiles no empty hdim64_* units
_HDIMDIFF = re.compile(r"HDIMDIFF(\d+)")
# the switches other settings own; `disable` names them to the user
OWNERS = {"FP16": "dtypes", "BACKWARD": "forward-only", "SM80": "cuda-archs"}
DTYPES = ("fp16", "bf16")  # upstream compiles bf16 always; FP16 is the only dtype switch
HEAD_DIMS = ("64", "96", "128", "192", "256")
DIFF64 = ("64_256", "64_512")  # Q/K head dim 64 with a larger V head dim
DIFF192 = ("192_128",)
DIFF_SWITCHES = ("HDIMDIFF64", "HDIMDIFF192")
SCHEDULER = "flash_prepare_scheduler.cu"
COMBINE = "flash_fwd_combine.cu"  # the split-KV combine step, with SPLIT


@dataclasses.dataclass(frozen=True)
class Fa3Tailoring:
    head_dims: tuple[str, ...]  # compiled
    dtypes: tuple[str, ...]
    backward: bool
    disabled: tuple[str, ...]  # `disable`'s switches, as upstream names them in lower case
    env: tuple[tuple[str, str], ...]  # FLASH_ATTENTION_DISABLE_<NAME>: TRUE or FALSE, each
    label: str  # "" or ".hdim128.bf16.fwd.nofp8": appended to the wheel's local version label

    @property
    def full(self) -> bool:
        return not self.label


def switches(setup_py: str) -> tuple[str, ...]:
    """The FLASH_ATTENTION_DISABLE_* switches a hopper/setup.py reads, in its order."""
    found = tuple(dict.fromkeys(_SWITCH.findall(setup_py)))
    if not found:
        raise FaShimError(
            "this hopper/setup.py reads no FLASH_ATTENTION_DISABLE_* switch: fa-shim cannot "
            "tailor it.",
            fix="report this with the flash-attention version; build without head-dims, "
            "dtypes, forward-only and disable meanwhile.",
        )
    return found


def _owner(switch: str) -> str | None:
    if _HDIM.fullmatch(switch) or _HDIMDIFF.fullmatch(switch):
        return "head-dims"
    return OWNERS.get(switch)


def _flat(name: str) -> str:
    """`paged-kv`, `paged_kv`, `PagedKV` and `pagedkv` name upstream's PAGEDKV."""
    return re.sub(r"[-_\s]", "", name).lower()


def tailoring(settings: Settings, known: tuple[str, ...]) -> Fa3Tailoring:
    """The set the settings ask for, as the environment of upstream's switches `known`."""
    head_dims = tuple(m.group(1) for s in known if (m := _HDIM.fullmatch(s)))
    # none asked: all of them
    chosen = api.head_dims(settings.head_dims, head_dims) or head_dims
    aliases = api.DTYPE_ALIASES
    dtypes = api.choose_values(settings.dtypes, DTYPES, aliases, "dtypes", "bf16") or DTYPES
    if "bf16" not in dtypes:
        raise FaShimError(
            f"dtypes has {', '.join(dtypes)} without bf16: FlashAttention-3 always compiles its "
            "bf16 kernels (upstream has no switch to leave them out).",
            fix="add bf16 (e.g. -C dtypes=bf16 or -C dtypes=fp16,bf16).",
        )
    for value in settings.disable:  # `disable` takes the switches no other setting owns
        owner = _owner(_flat(value).upper())
        if owner and _flat(value).upper() in known:
            raise FaShimError(
                f"disable has {value!r}, which the setting {owner} decides for FlashAttention-3.",
                fix=f"use -C {owner}=... instead (docs/guides/flash-attn-3.md#tailored-sets).",
            )
    features = tuple(s.lower() for s in known if not _owner(s))
    aliases = {v.strip().lower(): _flat(v) for v in settings.disable}
    disabled = api.choose_values(settings.disable, features, aliases, "disable", "fp8")
    off = {f"HDIM{d}" for d in head_dims if d not in chosen} | {n.upper() for n in disabled}
    off |= {s for s in known if (m := _HDIMDIFF.fullmatch(s)) and m.group(1) not in chosen}
    if "fp16" not in dtypes:
        off.add("FP16")
    if settings.forward_only:
        off.add("BACKWARD")
    for switch in sorted(off - set(known)):  # FP16 or BACKWARD, on a setup.py without them
        raise FaShimError(
            f"this hopper/setup.py has no {ENV_PREFIX}{switch} switch, so {_owner(switch)} "
            "cannot leave those kernels out.",
            fix=f"build without {_owner(switch)}.",
        )
    env = tuple(
        (ENV_PREFIX + s, "TRUE" if s in off else "FALSE")
        for s in known
        if _owner(s) != "cuda-archs"  # the arch choice sets it (sm_90a only)
    )
    words = [f"hdim{d}" for d in chosen] if len(chosen) < len(head_dims) else []
    words += list(dtypes) if len(dtypes) < len(DTYPES) else []
    words += ["fwd"] if settings.forward_only else []
    words += ["no" + n for n in disabled]
    label = "." + ".".join(words) if words else ""
    return Fa3Tailoring(chosen, dtypes, not settings.forward_only, disabled, env, label)


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
    off = switches_on(tailoring.env)

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


def switches_on(env: Iterable[tuple[str, str]]) -> set[str]:
    """The DISABLE switches a set turns on ({"HDIM64", "FP8", ...}) from its environment."""
    return {name[len(ENV_PREFIX) :] for name, value in env if value == "TRUE"}
