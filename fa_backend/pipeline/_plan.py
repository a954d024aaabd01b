"""The plan of a build: settings, flavour, torch, the wheel's name and metadata. Cheap, and all
that prepare_metadata_for_build_wheel needs: the hook imports this module alone."""

from __future__ import annotations

import difflib
from pathlib import Path

from ..core import _atomic, _log
from ..core._errors import FaShimError
from ..flavours import _registry
from ..flavours._interface import Plan
from ..settings import _settings
from ..toolchain import _requirements, _torch
from ..wheel._wheelfile import read_prepared_metadata
from . import _progress


def plan(config_settings: _settings.ConfigSettings | None) -> Plan:
    flavour, settings = _registry.load(config_settings)
    _log.set_verbose(settings.verbose)
    _progress.check_mode(settings.progress)  # a typo fails now, not after the prepare step
    _requirements.check()
    why = _atomic.unwritable(settings.resolved_cache_dir)  # sdists and logs go there
    if why:
        raise FaShimError(
            f"fa-shim's cache directory {settings.resolved_cache_dir} is not writable ({why}).",
            fix="point -C cache-dir=DIR (or XDG_CACHE_HOME) at a writable directory.",
        )
    torch = _torch.probe(settings.torch_python, settings.resolved_cache_dir / "torch-probes")
    return flavour.plan(settings, torch)


def write_metadata(plan: Plan, metadata_directory: str) -> str:
    """prepare_metadata_for_build_wheel's answer: <dist_info>/METADATA, written whole."""
    _atomic.write(Path(metadata_directory) / plan.dist_info / "METADATA", plan.metadata.encode())
    return plan.dist_info


def check_prepared_metadata(plan: Plan, metadata_directory: str) -> None:
    """pip resolved against prepared metadata: the wheel must carry exactly that."""
    old = read_prepared_metadata(Path(metadata_directory), plan.dist_info)
    if old != plan.metadata:
        diff = difflib.unified_diff(
            old.split("\n\n")[0].splitlines(),
            plan.metadata.split("\n\n")[0].splitlines(),
            "prepared",
            "this build",
            lineterm="",
            n=0,
        )
        raise FaShimError(
            "the metadata prepared earlier differs from what this build would produce "
            "(did torch or a setting change between the two steps?).",
            details="\n".join(diff),
            fix="run the install again so both steps see the same torch.",
        )
