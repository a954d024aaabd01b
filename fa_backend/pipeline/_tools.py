"""What a build uses and the room it needs, decided before anything is laid out: the toolchain,
the disk space, the scratch directory. Cheap: a wheel-cache hit needs these and the plan, never
the build's own modules (pipeline/_build)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..core import _log, _scratch
from ..flavours._interface import Plan, Tools
from ..settings import _settings
from ..toolchain import _jobs, _space, _toolkit


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
