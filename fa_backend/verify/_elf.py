"""ELF files as the dynamic linker sees them: what an extension module imports and needs, what
torch's libraries export (through their hash tables, as ld.so), and the CUDA code it embeds."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import struct
from pathlib import Path
from typing import BinaryIO

from ..core._errors import FaShimError
from ..toolchain._mangling import runtime_copy

FATBIN_MAGIC = 0xBA55ED50
_ARCH_SPECIFIC, _FAMILY_SPECIFIC, _COMPRESSED = 0x100000, 0x200000, 0x8000


@dataclasses.dataclass(frozen=True, order=True)
class CudaCode:
    arch: int  # 80 for sm_80
    variant: str  # "", "a" (arch-specific) or "f" (family-specific)
    ptx: bool  # PTX (JIT-compiled by the driver) rather than SASS

    @classmethod
    def sass(cls, target: str) -> CudaCode:
        """The SASS a build compiles for one of its targets ("90" is sm_90, "90a" sm_90a)."""
        match = re.fullmatch(r"(?:sm_)?(\d+)([af]?)", target)
        if not match:
            raise ValueError(f"{target!r} is not a CUDA architecture")
        return cls(int(match.group(1)), match.group(2), False)

    def __str__(self) -> str:
        return f"{'compute' if self.ptx else 'sm'}_{self.arch}{self.variant}"

    def runs_on(self, sm: int) -> bool:
        """Whether a GPU of compute capability sm (e.g. 86) can run this code."""
        if self.variant == "a":
            return sm == self.arch
        if self.ptx and not self.variant:
            return sm >= self.arch
        return sm // 10 == self.arch // 10 and sm >= self.arch


def parse_fatbin(stream: BinaryIO, start: int, size: int) -> list[CudaCode]:
    """The code entries of every fatbin container in a .nv_fatbin section, header by header
    (entry: u16 kind, u16, u32 header size, u64 payload, u32 sm at 28, u64 flags at 40)."""
    end_of_section = start + size

    def read(at: int, n: int) -> bytes:
        stream.seek(at)
        return stream.read(min(n, end_of_section - at))

    magic_bytes = struct.pack("<I", FATBIN_MAGIC)
    codes: set[CudaCode] = set()
    pos = start
    while pos + 16 <= end_of_section:
        head = read(pos, 16)
        magic, _version, header_size, length = struct.unpack("<IHHQ", head)
        if magic != FATBIN_MAGIC:  # padding between containers: find the next one
            chunk = read(pos + 1, 1 << 16)
            found = chunk.find(magic_bytes)
            pos = pos + 1 + (found if found >= 0 else max(1, len(chunk) - 3))
            continue
        entry, end = pos + header_size, min(pos + header_size + length, end_of_section)
        while entry + 48 <= end:
            header = read(entry, 48)
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", header)
            (sm,) = struct.unpack_from("<I", header, 28)
            (flags,) = struct.unpack_from("<Q", header, 40)
            if entry_header < 48:
                break
            if kind in (1, 2, 0x10):
                variant = "a" if flags & _ARCH_SPECIFIC else "f" if flags & _FAMILY_SPECIFIC else ""
                codes.add(CudaCode(sm, variant, kind == 1))
            entry += entry_header + payload
        pos = max(end, pos + 16)
    return sorted(codes)


TORCH_LIBS = (
    "libc10.so",
    "libc10_cuda.so",
    "libtorch.so",
    "libtorch_cpu.so",
    "libtorch_cuda.so",
    "libtorch_python.so",
)


@dataclasses.dataclass
class ElfModule:
    path: Path
    undefined: list[str]
    needed: list[str]
    cuda: list[CudaCode] | None  # None: no .nv_fatbin section
    runtime_copy: list[str] = dataclasses.field(default_factory=list)  # _mangling.runtime_copy
    # the PyInit_<name> it defines: the module a Python import of it really finds
    init: list[str] = dataclasses.field(default_factory=list)


def read_module(path: Path) -> ElfModule:
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        with path.open("rb") as f:
            elf = ELFFile(f)
            undefined, needed, init = [], [], []
            for section in elf.iter_sections():
                if isinstance(section, SymbolTableSection) and section["sh_type"] == "SHT_DYNSYM":
                    for s in section.iter_symbols():
                        if s.name and s["st_shndx"] == "SHN_UNDEF":
                            undefined.append(s.name)
                        elif s.name.startswith("PyInit_"):
                            init.append(s.name.removeprefix("PyInit_"))
                elif isinstance(section, DynamicSection):
                    needed += [
                        t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"
                    ]
            runtime = runtime_copy(elf)
            fatbin = elf.get_section_by_name(".nv_fatbin")
            cuda = None
            if fatbin is not None and fatbin["sh_type"] != "SHT_NOBITS":
                cuda = parse_fatbin(f, fatbin["sh_offset"], fatbin["sh_size"])
    except (ELFError, struct.error) as exc:
        raise FaShimError(
            f"{path} is not a readable ELF shared object ({exc}).",
            fix="the file is damaged or not a Linux extension module: rebuild flash-attn.",
        ) from None
    return ElfModule(path, undefined, needed, cuda, runtime, init)


class TorchExports(contextlib.ExitStack):
    """The symbols torch's libraries export, looked up through their hash tables as ld.so does."""

    def __init__(self, lib_dir: Path) -> None:
        from elftools.elf.elffile import ELFFile
        from elftools.elf.hash import ELFHashSection, GNUHashSection
        from elftools.elf.sections import SymbolTableSection

        super().__init__()
        self.libs: list[str] = []
        self._tables = []
        for name in TORCH_LIBS:
            path = lib_dir / name
            if not path.is_file():
                continue
            elf = ELFFile(self.enter_context(path.open("rb")))
            table = next(
                (s for s in elf.iter_sections() if isinstance(s, GNUHashSection)), None
            ) or next((s for s in elf.iter_sections() if isinstance(s, ELFHashSection)), None)
            if table is None:  # no hash table: a plain scan of .dynsym
                dynsym = next(
                    s
                    for s in elf.iter_sections()
                    if isinstance(s, SymbolTableSection) and s["sh_type"] == "SHT_DYNSYM"
                )
                table = {s.name: s for s in dynsym.iter_symbols()}
            self.libs.append(name)
            self._tables.append(table)

    def provider(self, name: str) -> str | None:
        for lib, table in zip(self.libs, self._tables):
            symbol = table.get(name) if isinstance(table, dict) else table.get_symbol(name)
            if (
                symbol is not None
                and symbol["st_shndx"] != "SHN_UNDEF"
                and symbol["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE")
                and symbol["st_other"]["visibility"] in ("STV_DEFAULT", "STV_PROTECTED")
            ):
                return lib
        return None
