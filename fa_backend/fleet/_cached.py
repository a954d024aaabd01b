"""The build with its caches around it, the one seam between them (build_wheel's): the wheel
cache around the whole build, the verified markers around its check, and for a wheel the build
compiles, the caches around its compilers (fleet/_compiling, pipeline/_build's Wrappers).
pipeline/ builds, and knows none of them. A hit imports neither the build nor _compiling."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from ..core import _atomic, _log
from ..core._digest import sha256_of
from ..core._errors import FaShimError
from ..flavours.api import Plan, Tools
from ..pipeline import api as pipeline
from ..toolchain import _compilers, _toolkit
from ..toolchain._torch import TorchInfo
from . import _handoff, _sccache, _wheel_cache


def toolchain(plan: Plan) -> Tools:
    """The build's toolchain, with the compiler cache the settings name (checked against the
    nvcc the build chose)."""
    tools = pipeline.toolchain(plan)
    cache = _compilers.compiler_cache(plan.settings.compiler_cache)
    if cache:
        _sccache.check_nvcc(cache, tools.nvcc)
        _log.info(f"compiling through the compiler cache {cache}")
    return dataclasses.replace(tools, compiler_cache=cache)


def _torch_identity(torch: TorchInfo) -> list:
    """What verify reads of torch: its facts and its libraries, by file identity."""
    files = []
    with contextlib.suppress(OSError):
        for lib in sorted(torch.lib_dir.glob("lib*.so*")):
            st = lib.stat()
            files.append([lib.name, st.st_ino, st.st_size, st.st_mtime_ns])
    return [torch.version, torch.cuda, torch.abi, torch.package_dir, files]


def verify_once(cache_dir: Path, wheel: Path, torch: TorchInfo, check: Callable[[], None]) -> None:
    """Run `check` (it raises) unless these bytes passed it against this torch and fa-shim
    (`<cache-dir>/verified/`): re-reading the ELF files cost most of a hit (docs/benchmarks.md)."""
    facts = [sha256_of(wheel), _torch_identity(torch), pipeline.fa_shim_sources()]
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


def _verified(plan: Plan, wheel: Path) -> None:
    verify_once(
        plan.settings.resolved_cache_dir, wheel, plan.torch, lambda: pipeline.verify(plan, wheel)
    )


def _fresh(plan: Plan, tools: Tools, scratch: Path, how: dict | None = None) -> Path:
    from . import _compiling  # a miss: the build and the caches around its compilers

    return _compiling.fresh_wheel(plan, tools, scratch, how, check=lambda w: _verified(plan, w))


def prepare(plan: Plan, metadata_directory: str) -> str:
    """prepare_metadata's: the metadata, and where the wheel cache serves this build, the
    wheel beside it for build_wheel to hand on (_handoff). What stops a lookup here (no nvcc on
    a login node, a refused root) is build_wheel's to report: metadata needs none of it."""
    dist_info = pipeline.write_metadata(plan, metadata_directory)
    s = plan.settings
    if not s.wheel_cache or (
        plan.flavour.needs_nvcc(plan) and _toolkit.would_download(plan.torch, s)
    ):
        return dist_info  # a toolkit from the index is build_wheel's to fetch
    try:
        _wheel_cache.check_root(s.resolved_wheel_cache_dir)
        tools = toolchain(plan)
        wheel = _wheel_cache.served(
            s.resolved_wheel_cache_dir,
            pipeline.fingerprint(plan, tools),
            plan.wheel_name,
            lambda wheel: _verified(plan, wheel),
            torch_version=plan.torch.version,
            variants=s.wheel_variants,
        )
        if wheel:
            pipeline.check_space(plan, tools, Path(metadata_directory), compiling=False)
            _handoff.give(wheel, metadata_directory, dist_info)
    except FaShimError:
        pass  # build_wheel meets it again, and says it
    except OSError as exc:  # the metadata directory: build_wheel serves the hit itself
        _log.info(f"the cached wheel is not handed on ({exc.strerror or exc}: {exc.filename})")
    return dist_info


def build(plan: Plan, wheel_directory: str, metadata_directory: str | None) -> str:
    """build_wheel's: the wheel cache's entry for the plan's fingerprint, or a fresh build kept
    there; with the wheel cache off, a fresh build."""
    if metadata_directory:
        pipeline.check_prepared_metadata(plan, metadata_directory)
    out_dir = Path(wheel_directory).absolute()
    s = plan.settings
    if s.wheel_cache:
        _wheel_cache.check_root(s.resolved_wheel_cache_dir)
    tools = toolchain(plan)
    pipeline.check_space(plan, tools, out_dir, compiling=not s.wheel_cache)
    with pipeline.scratch_dir(s) as scratch:
        if not s.wheel_cache:
            path = _wheel_cache.deliver(_fresh(plan, tools, scratch), out_dir)
        else:
            how: dict = {}

            def miss() -> Path:
                pipeline.check_space(plan, tools, out_dir)
                return _fresh(plan, tools, scratch, how)

            path = _wheel_cache.obtain(
                s.resolved_wheel_cache_dir,
                pipeline.fingerprint(plan, tools),
                plan.wheel_name,
                out_dir,
                lambda wheel: _verified(plan, wheel),
                miss,
                s.wheel_cache_lock_timeout,
                s.wheel_cache_heartbeat,
                built=how,
                torch_version=plan.torch.version,
                variants=s.wheel_variants,
            )
    _log.info(f"built {path}")
    return path.name
