"""The build with its caches around it, the one seam between them: the wheel cache around the
whole build, the compiler cache and the object cache around its compilers (pipeline/_build's
Wrappers), the verified markers around its check. pipeline/ builds, and knows none of them."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sysconfig
from collections.abc import Callable
from pathlib import Path

from ..core import _atomic, _log
from ..core._digest import sha256_of
from ..flavours._interface import Plan, Tools
from ..pipeline import _build, _progress
from ..pipeline._build import Wrappers
from ..pipeline._provenance import fa_shim_sources
from ..toolchain import _compilers
from ..toolchain._torch import TorchInfo
from . import _objects, _sccache, _stable_src, _wheel_cache

SERVE = "fa_backend.fleet._serve:serve"  # the object cache's side in the launcher


def toolchain(plan: Plan) -> Tools:
    """The build's toolchain, with the compiler cache the settings name (checked against the
    nvcc the build chose)."""
    tools = _build.toolchain(plan)
    cache = _compilers.compiler_cache(plan.settings.compiler_cache)
    if cache:
        _sccache.check_nvcc(cache, tools.nvcc)
        _log.info(f"compiling through the compiler cache {cache}")
    return dataclasses.replace(tools, compiler_cache=cache)


def wrappers(plan: Plan, tools: Tools, where: Path, audit: Path | None = None) -> Wrappers:
    """What stands around the compilers of a build in `where`: the compiler cache's settings,
    and the object cache's spec (`audit`: every unit compiled and compared there)."""
    env = {}
    if tools.compiler_cache:
        # every build has a fresh scratch path: hash paths relative to it, or nothing ever hits
        env = {"CCACHE_BASEDIR": str(where), "CCACHE_NOHASHDIR": "true"}
        env.update(_sccache.defaults(dict(os.environ)))  # as its server got them

    def units(tools: Tools, source: Path, commands) -> frozenset[str]:
        return object_cache(plan, tools, source, commands, audit)

    return Wrappers(env, SERVE, where / _objects.SPEC_NAME, units)


def prepare(plan: Plan, where: Path) -> _build.Prepared:
    """`prepare`'s: build.ninja written as a build would write it, the object cache asked."""
    tools = toolchain(plan)
    return _build.prepare(plan, where, tools, wrappers(plan, tools, where))


def object_cache(
    plan: Plan, tools: Tools, source: Path, commands, audit: Path | None = None
) -> frozenset[str]:
    """Write the object cache's spec (fleet/_objects) where the flavour's CUDA sources are
    torch-free; return the sources it serves without compiling. With `audit` (cache check
    --rebuild) every unit compiles, compared there with the entry a build would link."""
    s = plan.settings
    if not ((s.object_cache or audit) and tools.nvcc and plan.flavour.torch_free_kernels(plan)):
        return frozenset()
    units = [c for c in commands if c.kind == "nvcc"]
    cwd = source  # torch's build.ninja names absolute paths; relative ones are the setup dir's
    ccbin = next(filter(None, (_compilers.ccbin_in(c.args) for c in units)), None)
    inputs, unkeyable = _compilers.nvcc_inputs(tools.nvcc.path, ccbin)
    if unkeyable:
        _log.warn(f"object cache not used by this build: {unkeyable}")
        return frozenset()
    # torch's and Python's headers are never the toolkit's, even inside its root (conda)
    foreign = [plan.torch.package_dir, *{sysconfig.get_path(p) for p in ("include", "platinclude")}]
    keys = _objects.Keys(source.parent, tools.nvcc.cuda_home, inputs, foreign)
    by_output = {
        str((cwd / c.values("-o")[-1]).resolve()): {
            "key": keys.key(c.args[1:], c.file, cwd),
            "abi": c.last_define(_objects.ABI_DEFINE),
        }
        for c in units
    }
    root = _objects.root_of(s)
    if s.wheel_cache_dir:  # objects/ beside the team's wheels
        _wheel_cache.check_root(s.wheel_cache_dir)
    keep = audit is None and _objects.make_root(root, s.wheel_cache_dir)
    spec = _objects.write_spec(
        source.parent,
        root,
        by_output,
        sorted(keys.excluded),
        f"torch {plan.torch.version}",
        s.wheel_cache_lock_timeout,
        s.wheel_cache_heartbeat,
        keep,
        audit,
    )
    if audit:
        _log.info(f"compiling {len(units)} kernel objects to compare with those in {root}")
        return frozenset()
    hits = _objects.cached(spec)
    names = {str((cwd / c.values("-o")[-1]).resolve()): c.file.rsplit("/", 1)[-1] for c in units}
    served = frozenset(names[o] for o in hits)
    rest = [n for n in _progress.build_sources(commands) if n not in served]
    if hits:
        under = ", ".join(sorted({r["built_under"] for r in hits.values()}))
        _log.info(
            f"{len(hits)} kernel objects from the object cache (built under {under}), "
            f"compiling {', '.join(rest[:4])}{' ...' if len(rest) > 4 else ''}"
        )
    else:
        kept = f"kept in {root}" if keep else f"none kept ({root} cannot keep them)"
        _log.info(f"object cache: {len(units)} kernel objects to compile, {kept}")
    return served


def fresh_wheel(
    plan: Plan, tools: Tools, scratch: Path, how: dict | None = None, audit: Path | None = None
) -> Path:
    """The build, with the compiler and object caches around its compilers and the verified
    markers around its check: a checked wheel in scratch; `audit`: object_cache's."""
    # a compiler cache shared by nodes: the same source path everywhere, sccache's hit rate;
    # CUDA device code records its source path (_reproducible): the same path for every build
    shared = _sccache.is_sccache(tools.compiler_cache) or tools.nvcc is not None
    sources = plan.flavour.sources(plan, with_origin=False)
    place = _stable_src.place(scratch, shared, sources, plan.settings.keep_build_dir)
    with place as where, _sccache.session(tools.compiler_cache):
        return _build.fresh_wheel(
            plan,
            tools,
            where,
            scratch / "wheel",
            wrappers(plan, tools, where, audit),
            how,
            lambda wheel: _verified(plan, wheel),
        )


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


def _verified(plan: Plan, wheel: Path) -> None:
    verify_once(
        plan.settings.resolved_cache_dir, wheel, plan.torch, lambda: _build.verify(plan, wheel)
    )


def build(plan: Plan, wheel_directory: str, metadata_directory: str | None) -> str:
    """build_wheel's: the wheel cache's entry for the plan's fingerprint, or a fresh build kept
    there; with the wheel cache off, a fresh build."""
    if metadata_directory:
        _build.check_prepared_metadata(plan, metadata_directory)
    out_dir = Path(wheel_directory).absolute()
    s = plan.settings
    if s.wheel_cache:
        _wheel_cache.check_root(s.resolved_wheel_cache_dir)
    tools = toolchain(plan)
    _build.check_space(plan, tools, out_dir, compiling=not s.wheel_cache)
    with _build.scratch_dir(s) as scratch:
        if not s.wheel_cache:
            path = _wheel_cache.deliver(fresh_wheel(plan, tools, scratch), out_dir)
        else:
            how: dict = {}

            def miss() -> Path:
                _build.check_space(plan, tools, out_dir)
                return fresh_wheel(plan, tools, scratch, how)

            path = _wheel_cache.obtain(
                s.resolved_wheel_cache_dir,
                _build.fingerprint(plan, tools),
                plan.wheel_name,
                out_dir,
                lambda wheel: _verified(plan, wheel),
                miss,
                s.wheel_cache_lock_timeout,
                s.wheel_cache_heartbeat,
                built=lambda: how,
                torch_version=plan.torch.version,
                variants=s.wheel_variants,
            )
    _log.info(f"built {path}")
    return path.name
