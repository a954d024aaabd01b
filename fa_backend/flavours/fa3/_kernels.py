"""Tailored FlashAttention-3 builds: fa-shim's settings as upstream's FLASH_ATTENTION_DISABLE_*,
which hopper/setup.py reads from its environment (the switches a version knows are parsed from it).
A set is that environment, every switch said TRUE or FALSE. `head-dims`, `dtypes` and
`forward-only` own the HDIM<n>/HDIMDIFF<n>, FP16 and BACKWARD switches, the arch choice owns
SM80; `disable` takes the rest (docs/fa3-design.md)."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

from .. import api
from ..api import FaShimError

if TYPE_CHECKING:
    from ..api import Settings

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
