"""The build's public seam: the hooks, fleet/ (which wraps the build in its caches) and the CLI
call the build through these names only. The build reads no cache; compile wrappers come in
(Wrappers), and a plan goes in and a verified wheel comes out (fresh_wheel)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ._plan import (
    check_prepared_metadata,
    check_space,
    plan,
    scratch_dir,
    toolchain,
    write_metadata,
)
from ._progress import build_sources, preview
from ._provenance import fa_shim_sources, fingerprint, provenance
from ._seal import choose as network_seal

if TYPE_CHECKING:
    from ._build import Prepared, Wrappers, fresh_wheel, prepare, verify

# the compile pipeline (_build and all it imports) loads only where one of its names is used: a
# hook that plans, or a wheel-cache hit whose bytes passed before, imports none of it
_BUILD = {"Prepared", "Wrappers", "fresh_wheel", "prepare", "verify"}


def __getattr__(name: str):
    if name not in _BUILD:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("._build", __package__), name)


__all__ = [
    "Prepared",
    "Wrappers",
    "build_sources",
    "check_prepared_metadata",
    "check_space",
    "fa_shim_sources",
    "fingerprint",
    "fresh_wheel",
    "network_seal",
    "plan",
    "prepare",
    "preview",
    "provenance",
    "scratch_dir",
    "toolchain",
    "verify",
    "write_metadata",
]
