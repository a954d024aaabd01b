"""ELF files as the dynamic linker sees them: what an extension module imports and needs, and
what torch's libraries export (looked up through their hash tables, as ld.so does)."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

from ..core._errors import FaShimError
from ..toolchain._mangling import runtime_copy
from ._fatbin import CudaCode, parse_fatbin

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


class TorchExports:
    """The symbols torch's libraries export, looked up through their hash tables as ld.so does."""

    def __init__(self, lib_dir: Path) -> None:
        from elftools.elf.elffile import ELFFile
        from elftools.elf.hash import ELFHashSection, GNUHashSection
        from elftools.elf.sections import SymbolTableSection

        self.lib_dir = lib_dir
        self.libs: list[str] = []
        self._files = []
        self._tables = []
        for name in TORCH_LIBS:
            path = lib_dir / name
            if not path.is_file():
                continue
            f = path.open("rb")
            self._files.append(f)
            elf = ELFFile(f)
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

    def close(self) -> None:
        for f in self._files:
            f.close()

    def __enter__(self) -> TorchExports:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

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
