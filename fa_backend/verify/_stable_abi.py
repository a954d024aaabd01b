"""A module built against torch's stable ABI (FA3's flash_api_stable.cpp), checked by its symbols
alone: no C++ symbol of torch, and each C shim function it takes (aoti_torch_*, torch_*)
declared in this torch's headers, not gated newer than its floor (an ungated one: declared by the
floor's headers, where vendored_patches/stable-abi/ records them), and exported."""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

from packaging.version import Version

from ..resources import VENDORED
from ..toolchain._mangling import demangle, is_torch_symbol
from ..toolchain._torch import TorchInfo
from ._elf import ElfModule, TorchExports
from ._report import FAIL, PASS, Check, first, plural

# where torch's headers declare its stable C shim, under <torch>/include
SHIM_HEADERS = ("torch/csrc/inductor/aoti_torch", "torch/csrc/stable")
SHIM_PREFIXES = ("aoti_torch_", "torch_")
_DECLARATION = re.compile(r"AOTI_TORCH_EXPORT\b[^;{(]*?\b([A-Za-z_]\w*)\s*\(", re.S)
_IF = re.compile(r"\s*#\s*if(?:def|ndef)?\b(.*)")
_ELSE = re.compile(r"\s*#\s*(?:else|elif)\b")
_ENDIF = re.compile(r"\s*#\s*endif\b")
_GATE = re.compile(r"TORCH_FEATURE_VERSION\s*>=\s*TORCH_VERSION_(\d+)_(\d+)_(\d+)")


@dataclasses.dataclass(frozen=True)
class Declared:
    header: str  # relative to <torch>/include
    gate: str | None  # the TORCH_FEATURE_VERSION it is declared from, e.g. 2.10.0


def _declarations_in(text: str, header: str) -> dict[str, Declared]:
    """name -> where, for each AOTI_TORCH_EXPORT function of one header, with its #if block's
    feature-version gate (an #else branch is ungated)."""
    gates: list[str | None] = []  # one entry per open #if
    gate_of_line: list[str | None] = []
    for line in text.splitlines():
        opened = _IF.match(line)
        if opened:
            found = _GATE.search(opened.group(1))
            gates.append(".".join(found.groups()) if found else None)
        elif _ELSE.match(line) and gates:
            gates[-1] = None
        elif _ENDIF.match(line) and gates:
            gates.pop()
        gate_of_line.append(max(filter(None, gates), key=Version, default=None))
    found = {}
    for match in _DECLARATION.finditer(text):
        line = text.count("\n", 0, match.start(1))
        found.setdefault(match.group(1), Declared(header, gate_of_line[line]))
    return found


@functools.cache
def declarations(include: Path) -> dict[str, Declared]:
    """Every stable C shim function this torch's headers declare (empty: no headers shipped)."""
    found: dict[str, Declared] = {}
    for top in SHIM_HEADERS:
        for header in sorted((include / top).rglob("*.h")):
            text = header.read_text(encoding="utf-8", errors="replace")
            rel = header.relative_to(include).as_posix()
            for name, where in _declarations_in(text, rel).items():
                found.setdefault(name, where)
    return found


@functools.cache
def declared_at(floor: str) -> frozenset[str] | None:
    """The C shim functions torch <floor>'s headers declare, where fa-shim records them (None:
    not recorded): torch declares aoti_torch_* functions ungated, so no later header says."""
    try:
        text = (VENDORED / "stable-abi" / f"shim-{floor}.txt").read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return frozenset(ln for ln in text.splitlines() if ln and not ln.startswith("#"))


def looks_stable(modules: list[ElfModule]) -> bool:
    """No C++ symbol of torch, and some of its C shim: what a stable-ABI module takes."""
    undefined = {s for m in modules for s in m.undefined}
    return not any(is_torch_symbol(s) for s in undefined) and any(
        s.startswith(SHIM_PREFIXES) for s in undefined
    )


def _from_torch(name: str, exports: TorchExports, declared: dict[str, Declared]) -> bool:
    if name.startswith(("_Z", "Py", "_Py")):
        return False  # C++ (judged by its scope) or the interpreter's
    return name in declared or name.startswith(SHIM_PREFIXES) or exports.provider(name) is not None


def check(
    modules: list[ElfModule],
    torch: TorchInfo,
    exports: TorchExports,
    floor: str | None,
    rebuild: str,
) -> Check:
    """The symbols check of a stable-ABI module whose floor (None: not recorded) is given."""
    undefined = sorted({s for m in modules for s in m.undefined})
    claim = f"torch >= {floor}" if floor else "a torch floor fa-shim did not record"
    cxx = [s for s in undefined if is_torch_symbol(s)]
    if cxx:
        readable = demangle(cxx)
        shown = [f"{readable[s]} (from {exports.provider(s) or 'no torch library'})" for s in cxx]
        return Check(
            "symbols",
            FAIL,
            f"built for torch's stable ABI ({claim}), but the module takes "
            f"{plural(len(cxx), 'C++ symbol')} of torch, which only the torch it was compiled "
            f"against is sure to export: it is not a stable-ABI module. First: {shown[0]}",
            details=first(shown),
            fix=f"rebuild it: `{rebuild}` (report this: the compile command defined "
            "TORCH_TARGET_VERSION, yet torch's C++ API was used).",
        )
    include = Path(torch.package_dir) / "include"
    declared = declarations(include)
    taken = [s for s in undefined if _from_torch(s, exports, declared)]
    at_floor = declared_at(floor) if floor else None
    problems = []
    for name in taken:
        where, lib = declared.get(name), exports.provider(name)
        if lib is None and where is not None:
            problems.append(
                f"{name}: torch {torch.version}'s headers declare it, its libraries do not "
                "export it (a CPU-only torch?)"
            )
        elif lib is None:
            problems.append(
                f"{name}: torch {torch.version} neither declares nor exports it (older than the "
                "module needs)"
            )
        elif declared and where is None:
            problems.append(
                f"{name} (from {lib}): not a C shim function torch {torch.version}'s headers "
                "declare"
            )
        elif where and where.gate and floor and Version(where.gate) > Version(floor):
            problems.append(
                f"{name}: torch's headers declare it for torch >= {where.gate} only "
                f"({where.header}), newer than the module's floor {floor}"
            )
        elif where and not where.gate and at_floor is not None and name not in at_floor:
            problems.append(
                f"{name}: torch {floor}'s headers, the module's floor, do not declare it "
                f"(torch {torch.version}'s declare it without a version gate)"
            )
    if problems:
        return Check(
            "symbols",
            FAIL,
            f"built for torch's stable ABI ({claim}): {len(problems)} of the "
            f"{plural(len(taken), 'C shim symbol')} it takes from torch do not fit torch "
            f"{torch.version}:",
            details=first(problems),
            fix=f"install a torch that has them (>= {floor or 'the one it was built with'}), or "
            f"rebuild against this one: `{rebuild}`.",
        )
    libs = sorted({p for s in taken if (p := exports.provider(s))})
    declared_by = f"torch {torch.version}'s headers declare" if declared else "named like the shim"
    return Check(
        "symbols",
        PASS,
        f"stable ABI ({claim}): the module takes {plural(len(taken), 'symbol')} from torch, each "
        f"a C shim function {declared_by} and {', '.join(libs) or 'its libraries'} export; no "
        "C++ symbol of torch",
    )
