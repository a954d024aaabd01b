"""The plan of a build and what it uses, decided before anything is laid out: settings, flavour,
torch, the wheel's name and metadata (all that prepare_metadata_for_build_wheel needs), the
toolchain, the disk space, the scratch directory. Cheap: a wheel-cache hit needs these, never the
build's own modules (pipeline/_build)."""

from __future__ import annotations

import contextlib
import difflib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..core import _atomic, _log, _scratch
from ..core._errors import FaShimError
from ..flavours import _registry
from ..flavours._interface import Plan, Tools
from ..settings import _settings
from ..toolchain import _jobs, _requirements, _space, _toolkit, _torch
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


def toolchain(plan: Plan) -> Tools:
    """nvcc (the system's, or one from the index), the architectures and the compile jobs;
    a compiler cache is the caller's to add (fleet/_cached.toolchain)."""
    s, flavour = plan.settings, plan.flavour
    nvcc = archs = None
    if flavour.needs_nvcc(plan):
        nvcc = _toolkit.choose(plan.torch, s)
        _log.info(f"using nvcc {nvcc}, CUDA_HOME={nvcc.cuda_home}")
        archs = flavour.archs(s, plan.torch, nvcc.path)
    cores, memory = _jobs.available_cores(), _jobs.available_memory()
    sizing = flavour.sizing(plan, archs, cores, memory)
    n_archs = len(archs.targets) if archs else 1
    _log.info(_jobs.describe(sizing.jobs, sizing.threads, cores, memory, n_archs, sizing.cut))
    threads = sizing.threads if nvcc else None
    return Tools(nvcc, archs, sizing.jobs, threads, None, sizing.shape)  # no compiler cache


@contextlib.contextmanager
def scratch_dir(settings: _settings.Settings) -> Iterator[Path]:
    with _scratch.directory("build", keep=settings.keep_build_dir) as path:
        try:
            yield path
        finally:
            if settings.keep_build_dir:
                _log.info(f"kept the build directory {path}")


def check_space(plan: Plan, tools: Tools, out_dir: Path, compiling: bool = True) -> None:
    """The output directory; when compiling, scratch too (a cache that cannot keep the wheel
    costs a warning, not the build: fleet/_wheel_cache.obtain)."""
    peak, wheel = plan.flavour.disk_needs(plan, tools)
    needs = [("scratch", Path(tempfile.gettempdir()), peak)] if compiling else []
    needs.append(("the wheel", out_dir, wheel))
    _space.require(needs)
