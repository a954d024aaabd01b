"""The words users give a flavour's kernel-set settings (head dims, dtypes, switches), checked
against what a release knows, each unknown one refused with a did-you-mean."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

from ..core._errors import FaShimError

DTYPE_ALIASES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16"}


def did_you_mean(
    value: str, known: Iterable[str], template: str = " Did you mean {!r}?", cutoff: float = 0.5
) -> str:
    close = difflib.get_close_matches(value, list(known), n=1, cutoff=cutoff)
    return template.format(close[0]) if close else ""


def head_dims(values: Iterable[str], known: tuple[str, ...]) -> tuple[str, ...]:
    """The head dims asked for (`128`, `hdim128`, `d128`), in the release's order."""
    chosen = set()
    for value in values:
        text = re.sub(r"^(hdim|d)", "", value.strip().lower())
        if text in known:
            chosen.add(text)
            continue
        hint = did_you_mean(text, known)
        if text.isdigit() and 0 < int(text) <= int(known[-1]):
            # A head dim runs on the smallest kernel at least as large (HEADDIM_SWITCH).
            kernel = next(d for d in known if int(d) >= int(text))
            hint = f" Head dim {text} runs on the hdim{kernel} kernels: use {kernel}."
        raise FaShimError(
            f"head-dims has {value!r}, which is not a flash-attn kernel head dim.{hint}",
            fix="use some of " + ", ".join(known) + " (e.g. -C head-dims=64,128).",
        )
    return tuple(d for d in known if d in chosen)


def choose(
    values: Iterable[str],
    known: tuple[str, ...],
    aliases: Mapping[str, str],
    setting: str,
    example: str,
) -> tuple[str, ...]:
    """The names asked for (through their aliases), in the order `known` lists them."""
    chosen = set()
    for value in values:
        name = aliases.get(value.strip().lower(), value.strip().lower())
        if name not in known:
            raise FaShimError(
                f"{setting} has {value!r}, which fa-shim does not know.{did_you_mean(name, known)}",
                fix=f"use some of {', '.join(known)} (e.g. -C {setting}={example}).",
            )
        chosen.add(name)
    return tuple(k for k in known if k in chosen)
