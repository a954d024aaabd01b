"""A wheel-cache hit checked once per (bytes, torch, checks): the RECORD and verify result of a
wheel is a function of its bytes, the torch libraries it is compared with and fa-shim's own
check code. A hit re-hashes the wheel (milliseconds) and finds the pass recorded for exactly
those bytes and that torch in the user's own cache (`<cache-dir>/verified/`), where reading the
ELF files again cost most of a hit (docs/benchmarks.md: pip install --force-reinstall of a
cached wheel). A wheel or a torch that changed by one byte or one file is checked again."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from ..core import _atomic, _log
from ..core._digest import sha256_of
from ..toolchain._torch import TorchInfo
from ._self import fa_shim_sources


def _torch_identity(torch: TorchInfo) -> list:
    """What verify reads of torch: its facts and its libraries, by file identity."""
    files = []
    with contextlib.suppress(OSError):
        for lib in sorted(torch.lib_dir.glob("lib*.so*")):
            st = lib.stat()
            files.append([lib.name, st.st_ino, st.st_size, st.st_mtime_ns])
    return [torch.version, torch.cuda, torch.abi, torch.package_dir, files]


def once(cache_dir: Path, wheel: Path, torch: TorchInfo, check: Callable[[], None]) -> None:
    """Run `check` (it raises on a failure) unless these bytes passed it against this torch."""
    facts = [sha256_of(wheel), _torch_identity(torch), fa_shim_sources()]
    marker = cache_dir / "verified" / hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:32]
    if marker.is_file():
        _log.info(
            f"{wheel.name}: these bytes passed RECORD and verify against this torch before "
            f"({marker})"
        )
        return
    check()
    try:
        _atomic.write(marker, json.dumps({"wheel": wheel.name}).encode())
    except OSError as exc:  # bookkeeping: it only costs the next hit its check
        _log.warn(
            f"could not record that {wheel.name} passed its checks ({exc.strerror or exc}: "
            f"{exc.filename or marker}); the next wheel-cache hit checks it again"
        )
