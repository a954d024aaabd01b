"""Kernel sources compiled as several translation units (vendored 30-tu-parts.patch): a build's
wall time is its slowest sources, so a tailored set (idle cores) splits them all, a full set on
more cores than it keeps busy its longest few (_costs.best_split).

`X.cu` is compiled as `X.part0ofN.cu` ... `X.partNofN.cu`, files that set FA_SHIM_TU_PARTS/
FA_SHIM_TU_PART and include X.cu: part 0 keeps the runtime dispatch (and the small combine or
pre/post-processing kernels), parts 1..N a share of the kernels each (by a hash of their template
arguments), with the entry point renamed so that each copy is a distinct symbol.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

PATCH = "30-tu-parts.patch"
KERNEL_DIR = Path("csrc/flash_attn/src")
# the launchers the patch splits: forward, split-KV forward, backward
SPLITTABLE = ("flash_fwd_hdim*.cu", "flash_fwd_split_hdim*.cu", "flash_bwd_hdim*.cu")
ENTRY_POINTS = ("run_mha_fwd_", "run_mha_fwd_splitkv_dispatch", "run_mha_bwd_")
MAX_PARTS = 8  # beyond this the per-part fixed cost (headers, host code) outweighs the gain
_PART = re.compile(r"^(?P<source>.+)\.part(?P<k>\d+)of(?P<n>\d+)\.cu$")


def splittable(name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in SPLITTABLE)


def choose(setting: int | None, jobs: int, kernels: Sequence[str] | None, patched: bool) -> int:
    """Parts per forward source: the setting, else as many as the idle job slots allow."""
    if not patched or not kernels:
        return 1
    wanted = jobs // len(kernels) if setting is None else setting
    return max(1, min(MAX_PARTS, wanted))


def cut(name: str, parts: int, only: Collection[str] | None) -> bool:
    """Whether this source is compiled in parts: splittable, and one of `only` (None: all)."""
    return parts > 1 and splittable(name) and (only is None or name in only)


def split_names(
    kernels: Sequence[str], parts: int, only: Collection[str] | None = None
) -> list[str]:
    """The translation units of these sources, `only`'s (None: all) in `parts` parts each."""
    return [n for k in kernels for n in (part_names(k, parts) if cut(k, parts, only) else [k])]


def part_names(name: str, parts: int) -> list[str]:
    stem = name[: -len(".cu")]
    return [f"{stem}.part{k}of{parts}.cu" for k in range(parts + 1)]


def _wrapper(name: str, k: int, parts: int) -> str:
    lines = [
        f"// fa-shim: part {k} of {parts} of {name} (vendored_patches/.../{PATCH})",
        f"#define FA_SHIM_TU_PARTS {parts}",
        f"#define FA_SHIM_TU_PART {k}",
    ]
    if k:  # the source's entry point again: a distinct name per part, never called
        lines += [f"#define {e} fa_shim_part{k}_{e}" for e in ENTRY_POINTS]
    return "\n".join([*lines, f'#include "{name}"', ""])


def layout(
    kernel_dir: Path, parts: int, only: Collection[str] | None = None
) -> dict[str, list[str]]:
    """{kernel source: its part names} for this tree's sources of `only` (None: all)."""
    return {
        source.name: part_names(source.name, parts)
        for source in sorted(kernel_dir.glob("flash_*.cu"))
        if cut(source.name, parts, only) and not _PART.match(source.name)
    }


def write(
    kernel_dir: Path, parts: int, only: Collection[str] | None = None
) -> dict[str, list[str]]:
    """Write the part files next to the kernel sources that are split (see `layout`)."""
    split = layout(kernel_dir, parts, only)
    for source, names in split.items():
        for k, part in enumerate(names):
            (kernel_dir / part).write_text(_wrapper(source, k, parts), encoding="utf-8")
    return split


def source_of(name: str) -> str:
    """The kernel source a compiled file stands for: X.cu for X.partKofN.cu."""
    m = _PART.match(name)
    return f"{m['source']}.cu" if m else name


def check_complete(compiled: Iterable[str]) -> list[str]:
    """Problems with the parts of a build: every split source needs all its parts, once."""
    seen: dict[str, set[tuple[int, int]]] = {}
    for name in compiled:
        m = _PART.match(name)
        if m:
            seen.setdefault(f"{m['source']}.cu", set()).add((int(m["k"]), int(m["n"])))
    problems = []
    for source, got in sorted(seen.items()):
        n = max(n for _, n in got)
        if got != {(k, n) for k in range(n + 1)}:  # one count of parts, and every part of it
            problems.append(f"{source}: parts {sorted(got)}")
    return problems
