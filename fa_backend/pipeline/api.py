"""The build's public seam: the hooks, fleet/ (which wraps the build in its caches) and the CLI
call the build through these names only. The build reads no cache; compile wrappers come in
(Wrappers), and a plan goes in and a verified wheel comes out (fresh_wheel)."""

from ._build import Prepared, Wrappers, fresh_wheel, prepare, verify
from ._plan import check_prepared_metadata, plan, write_metadata
from ._progress import build_sources, preview
from ._provenance import fa_shim_sources, fingerprint, provenance
from ._seal import choose as network_seal
from ._tools import check_space, scratch_dir, toolchain

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
