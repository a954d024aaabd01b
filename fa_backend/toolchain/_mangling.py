"""Itanium C++ mangled names, read as far as verify needs: whose a symbol is (torch's or not)
and which std::string ABI it mentions; c++filt, when installed, for readable names.

A torch symbol is one whose outermost scope is c10, at, torch or caffe2 (read from the mangled
name: `_ZN3c10...`, `_ZNK2at...`, `_ZTVN5torch...`, thunks and guard variables included), or
torch's Python glue named THP* (`THPVariableClass`, `_Z16THPVariable_Wrap...`). Everything else
(libstdc++, libc, CUDA, Python) is not torch's to export.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator

TORCH_SCOPES = ("c10", "at", "torch", "caffe2")

_SPECIAL = re.compile(r"_Z(?:T[VIST]|G[VR]|Th(?:n?\d+_)|Tv(?:n?\d+_){2}|Z)*")
_STD_ABBREV = set("tabsiod")

# Symbols only the C++ runtime itself defines (libsupc++ and libstdc++'s own code, never a
# template a module instantiates): a module that defines one carries a copy of the runtime,
# linked from a libstdc++.a. Next to the process's libstdc++ (torch's) that copy's locale and
# exception state is never set up: the module crashes formatting its first error message.
CXX_RUNTIME_MARKERS = frozenset(
    {"__gxx_personality_v0", "__cxa_throw", "_ZSt9terminatev", "_ZNSt6locale7classicEv"}
)


def runtime_copy(elf) -> list[str]:
    """The CXX_RUNTIME_MARKERS an ELF file (a pyelftools ELFFile) defines itself, in .dynsym or,
    unless stripped, .symtab (a copy hidden with --exclude-libs is still there)."""
    from elftools.elf.sections import SymbolTableSection

    return sorted(
        {
            sym.name
            for section in elf.iter_sections()
            if isinstance(section, SymbolTableSection)
            for sym in section.iter_symbols()
            if sym.name in CXX_RUNTIME_MARKERS and sym["st_shndx"] != "SHN_UNDEF"
        }
    )


def _source_name(mangled: str, i: int) -> tuple[str, int] | None:
    m = re.compile(r"\d+").match(mangled, i)
    if not m:
        return None
    end = m.end() + int(m.group())
    return mangled[m.end() : end], end


def scope(mangled: str) -> str | None:
    """The outermost name of a mangled symbol: 'c10' for _ZN3c106detail..., None if std/C."""
    if not mangled.startswith("_Z"):
        return None
    i = _SPECIAL.match(mangled).end()
    if mangled.startswith("N", i):
        i += 1
        while i < len(mangled) and mangled[i] in "rVKRO":
            i += 1
    found = _source_name(mangled, i)
    return found[0] if found else None


def is_torch_symbol(name: str) -> bool:
    if name.startswith("THP"):
        return True
    outer = scope(name)
    return outer is not None and (outer in TORCH_SCOPES or outer.startswith("THP"))


def _tokens(mangled: str) -> Iterator[str]:
    """A rough tokenizer of the Itanium mangling: enough to tell std::string's `Ss` apart from
    the same letters inside an identifier (which is skipped by its length prefix)."""
    i, n = 2, len(mangled)
    while i < n:
        c = mangled[i]
        if c.isdigit():
            found = _source_name(mangled, i)
            assert found is not None
            yield found[0]
            i = found[1]
        elif c == "S" and i + 1 < n and mangled[i + 1] in _STD_ABBREV:
            yield mangled[i : i + 2]
            i += 2
        elif c in "ST" and i + 1 < n and (mangled[i + 1] == "_" or mangled[i + 1].isalnum()):
            end = mangled.find("_", i + 1)  # S<seq-id>_ / T<n>_
            if end < 0 or not mangled[i + 1 : end].isalnum():
                yield c
                i += 1
            else:
                yield mangled[i : end + 1]
                i = end + 1
        elif c == "A" and i + 1 < n and mangled[i + 1].isdigit():  # array bound A<n>_
            end = mangled.find("_", i)
            yield mangled[i : end + 1]
            i = end + 1
        elif c == "L" and i + 1 < n and mangled[i + 1] in "abcdefghijlmnostxy":
            end = mangled.find("E", i)  # literal L<builtin type><value>E
            yield mangled[i : end + 1]
            i = end + 1 if end > 0 else n
        else:
            yield c
            i += 1


def string_abi(mangled: str) -> int | None:
    """1 if the symbol mentions std::string in the new (C++11) ABI, 0 in the old, else None."""
    if "NSt7__cxx11" in mangled or "B5cxx11" in mangled:
        return 1
    if mangled.startswith("_Z") and ("Ss" in mangled or "NSs" in mangled):
        try:
            if any(t == "Ss" for t in _tokens(mangled)):
                return 0
        except (AssertionError, ValueError):
            return None
    return None


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Readable names through c++filt when it is installed; otherwise the mangled ones."""
    names = list(names)
    result = {n: n for n in names}
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return result
    try:
        out = subprocess.run(
            [cxxfilt], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=60
        ).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return result
    if len(out) == len(names):
        result.update(zip(names, out))
    return result
