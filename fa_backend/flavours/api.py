"""fa-shim's flavour API: everything a flavour plug-in (a `fa_shim.flavours` entry point) needs,
in one public module. Plug-ins import from here only; a change to a name here is announced in
CHANGELOG.md (docs/architecture.md, "Writing a flavour")."""

from __future__ import annotations

from packaging.tags import Tag

from ..core._errors import FaShimError
from ..schedule._schedule import Machine
from ..settings._model import Setting, Settings
from ..sources._patches import Patch
from ..toolchain._archs import ArchChoice
from ..toolchain._compile_commands import Command
from ..toolchain._compilers import Nvcc
from ..toolchain._torch import TorchInfo
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
    "ArchChoice",
    "Command",
    "Costs",
    "FaShimError",
    "Flavour",
    "Machine",
    "Names",
    "Nvcc",
    "Patch",
    "Plan",
    "SdistSpec",
    "Setting",
    "Settings",
    "Sizing",
    "Tag",
    "Tools",
    "TorchInfo",
    "core_metadata",
    "full_version",
    "read_pkg_info",
    "torch_requirement",
    "wheel_tag",
]
