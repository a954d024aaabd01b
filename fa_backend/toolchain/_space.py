"""Free disk space, checked before the work that needs it: "needs N GB on DIR, has M"; the
compile's scratch peak and the wheel are scaled from measured builds, erring high."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..core import _failures
from ..core._errors import FaShimError

MB = 1000**2
GB = 1000**3
# docs/benchmarks.md, "Disk space": a tailored 2.8.3 build (4 kernels, sm_90) peaked at 356 MB
# of scratch, its wheel 3.7 MB (the full one-arch wheel 62.6 MB); a full build's is estimated.
SCRATCH_BASE = 200 * MB
SCRATCH_PER_KERNEL_ARCH = 40 * MB
WHEEL_PER_KERNEL_ARCH = 1 * MB
FULL_KERNELS = 72
MARGIN = 1.25  # filesystems round up, compilers write temporary files beside their objects


def _gb(n: float) -> str:
    if n < MB:
        return f"{n / 1000:.0f} kB"
    if n < GB:
        return f"{n / MB:.1f} MB"
    return f"{n / GB:.1f} GB"


def require(needs: list[tuple[str, Path, int]]) -> None:
    """Each (what, directory, bytes); directories on one filesystem add up."""
    by_device: dict[int, list[tuple[str, Path, int]]] = {}
    for what, directory, size in needs:
        existing = _failures.directory_of(directory)
        if existing is None:
            continue
        by_device.setdefault(os.stat(existing).st_dev, []).append((what, existing, size))
    for entries in by_device.values():
        total = sum(size for _, _, size in entries)
        have = shutil.disk_usage(entries[0][1]).free
        if have < total:
            parts = ", ".join(f"{what} {_gb(size)}" for what, _, size in entries)
            place = _failures.where_it_is(entries[0][1])
            raise FaShimError(
                f"not enough disk space: the build needs {_gb(total)} on {place}, has "
                f"{_gb(have)} ({parts}).",
                fix="free space there, or point that directory at a larger disk; nothing was "
                "extracted or compiled yet.",
            )


def before_extract(dest: Path, size: int) -> None:
    """`size`: what the archive's members write, read off their headers as it is unpacked
    (sources/_archives.extract); never gzip's trailer, the size modulo 4 GiB."""
    require([("extracting the sdist", dest, int(size * MARGIN))])


def compile_needs(kernels: int | None, archs: int, sdist_size: int) -> tuple[int, int]:
    """(scratch peak, wheel size) of `kernels` kernel TUs x `archs` (None: from the sdist)."""
    if kernels is None:
        return int(20 * sdist_size * MARGIN), int(4 * sdist_size)
    units = max(kernels, 1) * max(archs, 1)
    scratch = SCRATCH_BASE + units * SCRATCH_PER_KERNEL_ARCH
    return int(scratch * MARGIN), int(units * WHEEL_PER_KERNEL_ARCH * MARGIN)
