"""Itanium C++ mangled names, read as far as verify needs: whose a symbol is (torch's or not)
and which std::string ABI it mentions; readable names from libstdc++'s own demangler.

A torch symbol's outermost scope is c10, at, torch or caffe2 (`_ZN3c10...`, `_ZTVN5torch...`),
or it is torch's Python glue named THP*; everything else is not torch's to export.
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections.abc import Iterable

TORCH_SCOPES = ("c10", "at", "torch", "caffe2")

# special names' prefixes, a nested name's N and qualifiers, then the outermost <source-name>'s
# length (the name follows)
_SCOPE = re.compile(r"_Z(?:T[VIST]|G[VR]|Th(?:n?\d+_)|Tv(?:n?\d+_){2}|Z)*(?:N[rVKRO]*)?(\d+)")

# Symbols only the C++ runtime itself defines (never a template a module instantiates): a module
# that defines one carries a copy linked from a libstdc++.a, whose locale and exception state is
# never set up next to torch's: the module crashes formatting its first error message.
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


def scope(mangled: str) -> str | None:
    """The outermost name of a mangled symbol: 'c10' for _ZN3c106detail..., None if std/C."""
    m = _SCOPE.match(mangled)
    return mangled[m.end() : m.end() + int(m.group(1))] if m else None


def is_torch_symbol(name: str) -> bool:
    outer = scope(name) or ""
    return name.startswith("THP") or outer in TORCH_SCOPES or outer.startswith("THP")


@functools.cache
def _cxa_demangle():
    """libstdc++'s abi::__cxa_demangle (the process's, else the system's), or None."""
    try:
        fn = ctypes.CDLL("libstdc++.so.6").__cxa_demangle
    except OSError:
        return None
    fn.restype = ctypes.c_void_p  # a malloc'd string, freed below
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return fn


def _readable(name: str) -> str | None:
    """The demangled name, or None for one that is not a valid mangled name (or no demangler)."""
    fn = _cxa_demangle()
    found = fn(name.encode(), None, None, None) if fn and name.startswith("_Z") else None
    if not found:
        return None
    try:
        return ctypes.string_at(found).decode(errors="replace")
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(found))


def string_abi(mangled: str) -> int | None:
    """1 if the symbol mentions std::string in the new (C++11) ABI, 0 in the old, else None."""
    if "NSt7__cxx11" in mangled or "B5cxx11" in mangled:
        return 1
    if "Ss" in mangled:  # the old one's abbreviation, or just these letters in a name
        readable = _readable(mangled) or ""
        if "std::string" in readable or "std::basic_string<" in readable:
            return 0
    return None


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Readable names where they demangle; the others as they are."""
    return {n: _readable(n) or n for n in names}
