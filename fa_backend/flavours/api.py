"""fa-shim's flavour API: everything a flavour needs, in one public module. The built-in flavours
(fa2, fa3) and plug-ins (a `fa_shim.flavours` entry point) import from here only; a change to a
name here is announced in CHANGELOG.md (docs/architecture.md, "Writing a flavour").

Names are grouped by concern below; where a helper's own module name said what it works on, the
name here says it (`atomic_write`, `read_patches`, `extract_archive`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from packaging.tags import Tag

# errors, logs, files
from ..core._atomic import write as atomic_write
from ..core._atomic import writing as atomic_writing
from ..core._digest import sha256_of
from ..core._errors import FaShimError, NotLocal
from ..core._failures import NO_SPACE, no_space
from ..core._failures import name_it as name_os_error
from ..core._log import info, warn
from ..core._version import __version__ as FA_SHIM_VERSION

# where fa-shim's own files are
from ..resources import CHECKOUT, PROJECT, VENDORED

# estimates and the compile's memory
from ..schedule._schedule import Cost, Machine, makespan, predict, simulate
from ..schedule._schedule import plan as plan_pools

# settings
from ..settings._model import Setting
from ..settings._settings import Settings, given_to_the_build, read_pyproject_table

# sources: archives and patches
from ..sources._archives import BROKEN as BROKEN_ARCHIVE
from ..sources._archives import UnsafeMember, member_parts, unsafe_error
from ..sources._archives import checked as checked_members
from ..sources._archives import extract as extract_archive
from ..sources._patches import Patch
from ..sources._patches import apply_all as apply_patches
from ..sources._patches import read as read_patches
from ..sources._patches import topic as patch_topic

# the toolchain: architectures, compile commands, jobs, disk space, torch
from ..toolchain._archs import (
    MIN_ARCH,
    ArchChoice,
    Mechanism,
    Selection,
    base_arch,
    capabilities,
    check_gencodes,
    gencodes,
    nvcc_arch_list,
)
from ..toolchain._archs import resolve as resolve_archs
from ..toolchain._compile_commands import Command, target_version
from ..toolchain._compilers import Nvcc
from ..toolchain._jobs import JOB_BYTES_ONE_ARCH, available_memory, plan_jobs
from ..toolchain._space import FULL_KERNELS, before_extract, compile_needs
from ..toolchain._torch import TorchInfo

# the wheel's names and metadata
from ..wheel._metadata import (
    Names,
    core_metadata,
    full_version,
    limited_api_tag,
    read_pkg_info,
    stable_abi_label,
    torch_requirement,
    wheel_tag,
)
from ..wheel._sdist_self import SdistSpec

# what a flavour is, and the helpers of a release's files and of setting values
from ._interface import Costs, Flavour, Plan, Sizing, Tools
from ._release_files import (
    PATCH_DIR,
    RELEASE_FILE,
    UnitTable,
    is_version,
    key_hint,
    load_units,
    patch_files,
    read_toml,
)
from ._vocabulary import DTYPE_ALIASES, did_you_mean, head_dims
from ._vocabulary import choose as choose_values

# the network's modules load only where a name of theirs is used (a build whose sources are here
# never imports them: a wheel-cache hit stays quick)
if TYPE_CHECKING:
    from ..sources._index import FETCH_ERRORS, redact
    from ..sources._index import download as download_sdist
_NETWORK = {"FETCH_ERRORS": "FETCH_ERRORS", "download_sdist": "download", "redact": "redact"}


def __getattr__(name: str):
    if name not in _NETWORK:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ..sources import _index

    return getattr(_index, _NETWORK[name])


__all__ = [
    "BROKEN_ARCHIVE",
    "CHECKOUT",
    "DTYPE_ALIASES",
    "FA_SHIM_VERSION",
    "FETCH_ERRORS",
    "FULL_KERNELS",
    "JOB_BYTES_ONE_ARCH",
    "MIN_ARCH",
    "NO_SPACE",
    "PATCH_DIR",
    "PROJECT",
    "RELEASE_FILE",
    "VENDORED",
    "ArchChoice",
    "Command",
    "Cost",
    "Costs",
    "FaShimError",
    "Flavour",
    "Machine",
    "Mechanism",
    "Names",
    "NotLocal",
    "Nvcc",
    "Patch",
    "Plan",
    "SdistSpec",
    "Selection",
    "Setting",
    "Settings",
    "Sizing",
    "Tag",
    "Tools",
    "TorchInfo",
    "UnitTable",
    "UnsafeMember",
    "apply_patches",
    "atomic_write",
    "atomic_writing",
    "available_memory",
    "base_arch",
    "before_extract",
    "capabilities",
    "check_gencodes",
    "checked_members",
    "choose_values",
    "compile_needs",
    "core_metadata",
    "did_you_mean",
    "download_sdist",
    "extract_archive",
    "full_version",
    "gencodes",
    "given_to_the_build",
    "head_dims",
    "info",
    "is_version",
    "key_hint",
    "limited_api_tag",
    "load_units",
    "makespan",
    "member_parts",
    "name_os_error",
    "no_space",
    "nvcc_arch_list",
    "patch_files",
    "patch_topic",
    "plan_jobs",
    "plan_pools",
    "predict",
    "read_patches",
    "read_pkg_info",
    "read_pyproject_table",
    "read_toml",
    "redact",
    "resolve_archs",
    "sha256_of",
    "simulate",
    "stable_abi_label",
    "target_version",
    "torch_requirement",
    "unsafe_error",
    "warn",
    "wheel_tag",
]
