"""fa-shim's flavour API: everything a flavour plug-in (a `fa_shim.flavours` entry point) needs,
in one public module. Plug-ins import from here only; a change to a name here is announced in
CHANGELOG.md (docs/architecture.md, "Writing a flavour")."""

from __future__ import annotations

from ..core._errors import FaShimError
from ..settings._model import Setting
from ..wheel._metadata import (
    Names,
    core_metadata,
    full_version,
    read_pkg_info,
    torch_requirement,
    wheel_tag,
)
from ..wheel._sdist_self import SdistSpec
from ._interface import Costs, Flavour, Plan, Sizing, Tools

__all__ = [
    "Costs",
    "FaShimError",
    "Flavour",
    "Names",
    "Plan",
    "SdistSpec",
    "Setting",
    "Sizing",
    "Tools",
    "core_metadata",
    "full_version",
    "read_pkg_info",
    "torch_requirement",
    "wheel_tag",
]
