"""The CUDA code a module embeds, read from its .nv_fatbin section: which SASS (sm_XX, sm_XXa,
sm_XXf) and PTX (compute_XX), and on which GPUs each of them runs."""

from __future__ import annotations

import dataclasses
import os
import re
import struct
from typing import BinaryIO

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


def parse_fatbin(stream: BinaryIO, start: int = 0, size: int | None = None) -> list[CudaCode]:
    """The code entries of every fatbin container in a .nv_fatbin section, header by header
    (payloads skipped). Container: u32 magic, u16 version, u16 header size, u64 entries' size.
    Entry: u16 kind (1 PTX, 2 ELF), u16, u32 header size, u64 payload size, u32 sm at 28, u64
    flags at 40."""
    if size is None:
        size = stream.seek(0, os.SEEK_END) - start
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
