"""The pipeline behind the hooks, step by step: plan (cheap: settings, torch, sdist, names),
toolchain, prepare (build.ninja written, nothing compiled), the upstream build, repack, verify,
and build, which runs them through the wheel cache. The steps' data is in _plan, what went into a
wheel in _provenance, the wheel file in _wheelfile and _repack, the cache in _wheel_cache."""

from __future__ import annotations

import contextlib
import difflib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ..core import _atomic, _log
from ..core._errors import FaShimError
from ..flavours.fa2 import _kernels, _releases, _sdist, _tu_parts
from ..flavours.fa3 import _fa3_build
from ..fleet import _sccache, _stable_src, _wheel_cache
from ..settings import _settings
from ..toolchain import _archs, _compilers, _jobs, _preflight, _requirements, _toolkit, _torch
from ..verify import _verify
from ..wheel import _metadata
from ..wheel._wheelfile import publish
from . import (
    _compile_commands,
    _patches,
    _progress,
    _reproducible,
    _runner,
    _space,
    _upstream,
    _verified,
)
from ._plan import Plan, Prepared, Tools, stats_file
from ._provenance import fingerprint, provenance
from ._repack import repack

# what the hooks and the CLI call (provenance: `prepare`'s JSON)
__all__ = [
    "Plan",
    "Prepared",
    "Tools",
    "build",
    "plan",
    "prepare",
    "provenance",
    "toolchain",
    "write_metadata",
]


def plan(config_settings: _settings.ConfigSettings | None) -> Plan:
    settings = _settings.load(config_settings)
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
    if settings.flavour == "fa3":
        return _fa3_build.plan(settings, torch)
    sdist = _sdist.locate(settings)
    patches = tuple(_patches.patches_for(sdist.version)) if sdist.pinned else ()
    tailoring = _kernels.tailoring(settings, sdist.version)
    version = _metadata.full_version(sdist.version, torch.label + tailoring.label)
    metadata = _metadata.core_metadata(
        _metadata.read_pkg_info(sdist.path), version, _metadata.torch_requirement(torch.version)
    )
    return Plan(
        settings, torch, sdist, patches, version, _metadata.wheel_tag(), metadata, tailoring
    )


def write_metadata(plan: Plan, metadata_directory: str) -> str:
    target = Path(metadata_directory) / plan.dist_info
    target.mkdir(parents=True, exist_ok=True)
    _atomic.write(target / "METADATA", plan.metadata.encode("utf-8"))
    return plan.dist_info


def check_prepared_metadata(plan: Plan, metadata_directory: str) -> None:
    """pip resolved against prepared metadata: the wheel must carry exactly that."""
    prepared_dir = Path(metadata_directory)
    prepared = (
        (prepared_dir / "METADATA")
        if (prepared_dir / "METADATA").is_file()
        else prepared_dir / plan.dist_info / "METADATA"
    )
    old = prepared.read_text(encoding="utf-8") if prepared.is_file() else ""
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


# ---------------------------------------------------------------------------- the build itself


def toolchain(plan: Plan) -> Tools:
    s = plan.settings
    if plan.fa3:
        nvcc = _toolkit.choose(plan.torch, s)
        _log.info(f"using nvcc {nvcc}, CUDA_HOME={nvcc.cuda_home}")
        env = _jobs.env_for(s, 1)
        cache = _compilers.compiler_cache(s.compiler_cache)
        archs = _fa3_build.archs(s, nvcc.path)
        jobs = _fa3_build.jobs(plan, int(env["MAX_JOBS"]), _jobs.available_memory())
        return Tools(nvcc, archs, jobs, int(env["NVCC_THREADS"]), cache)
    nvcc = archs = None
    if _sdist.has_cuda_sources(plan.sdist, s.resolved_cache_dir / "sdist-facts"):
        nvcc = _toolkit.choose(plan.torch, s)  # the system's, or one from the index
        _log.info(f"using nvcc {nvcc}, CUDA_HOME={nvcc.cuda_home}")
        archs = _archs.resolve(s, plan.torch, nvcc.path, plan.sdist.version, os.environ)
    n_archs = len(archs.targets) if archs else 1
    kernels = (
        sorted(_kernels.expected_kernels(plan.tailoring, plan.sdist.version))
        if _releases.release(plan.sdist.version).kernels
        else None
    )
    # idle job slots become parts of the forward sources, and the parts more jobs
    parts = _tu_parts.choose(
        s.tu_parts,
        _jobs.plan_jobs(
            _jobs.available_cores(), _jobs.available_memory(), n_archs, s.max_jobs, s.nvcc_threads
        )[0],
        kernels,
        _releases.release(plan.sdist.version).tu_parts,
    )
    # the kernel TUs and flash_api.cpp, all compiled at once when cores and memory allow
    n_sources = _tu_parts.count_sources(kernels, parts) + 1 if kernels else None
    env = _jobs.env_for(s, n_archs, n_sources)
    threads = int(env["NVCC_THREADS"]) if nvcc else None
    if parts > 1:
        _log.info(f"compiling each forward kernel source as {parts} parts (-C tu-parts)")
    cache = _compilers.compiler_cache(s.compiler_cache)
    if cache:
        _log.info(f"compiling through the compiler cache {cache}")
    return Tools(nvcc, archs, int(env["MAX_JOBS"]), threads, cache, parts)


def prepare(plan: Plan, scratch: Path, tools: Tools | None = None) -> Prepared:
    """Extract, patch and let torch write build.ninja (nothing compiled), then check it."""
    tools = tools or toolchain(plan)
    log_dir = plan.settings.resolved_cache_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"flash-attn-{plan.version}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    shutil.rmtree(scratch / "src", ignore_errors=True)  # a prepare into a used directory
    if plan.fa3:
        source = _fa3_build.lay_out(plan, scratch / "src")
    else:
        _space.before_extract(plan.sdist.path, scratch)
        source = _sdist.extract(plan.sdist, scratch / "src")
        _patches.apply_all(list(plan.patches), source)
        _tu_parts.write(source / _tu_parts.KERNEL_DIR, tools.tu_parts)
    code, output, report = _upstream.run_setup(
        plan, tools, source, scratch / "dist", "prepare", log
    )
    if code != 0:
        raise _upstream.failure(code, report, log, output)
    if not report.get("ninja_files"):
        raise FaShimError(
            "upstream setup.py declared no compiled extension (a py3-none-any "
            "build would not import).",
            fix=f"read the log: {log}",
        )
    ninja_file = Path(report["ninja_files"][-1])
    commands = _compile_commands.read(ninja_file)
    _compile_commands.verify_abi(commands, plan.torch.abi, ninja_file)
    if plan.fa3:
        _fa3_build.check(commands, plan)
    else:
        if tools.archs:
            _archs.check_gencodes(commands, tools.archs.targets)
        _kernels.check_sources(commands, plan.tailoring, plan.sdist.version)
    # the launcher's records, where the upstream run keeps them (Prepared.stats_file)
    _preflight.check(commands, ninja_file.parent, stats=stats_file(source.parent))
    return Prepared(source, tools, ninja_file, commands, report, log)


def run_upstream_build(plan: Plan, prep: Prepared) -> Path:
    """Run upstream's bdist_wheel; on an out-of-memory kill, again with half the jobs (ninja
    keeps the objects already compiled). Returns upstream's wheel, in the scratch."""
    dist = prep.source.parent / "dist"
    jobs = prep.tools.jobs
    started = time.monotonic()
    while True:
        code, output, report = _upstream.run_setup(
            plan, prep.tools, prep.source, dist, "wheel", prep.log, jobs
        )
        if code == 0:
            break
        if not (_runner.killed_for_memory(output) and jobs > 1):
            raise _upstream.failure(code, report, prep.log, output)
        done = len(_runner.compiled(prep.stats_file))
        jobs = max(1, jobs // 2)
        _log.warn(
            f"a compiler was killed for lack of memory; retrying with {jobs} job(s), "
            f"keeping the {done} object(s) already compiled (set -C max-jobs to choose)"
        )
    stats = _runner.compiled(prep.stats_file)
    _log.info(
        f"upstream build: {time.monotonic() - started:.0f} s, of which "
        f"{_runner.compile_span(stats):.0f} s compiling {len(stats)} translation units"
    )
    _compile_commands.verify_abi(
        _compile_commands.read(prep.ninja_file), plan.torch.abi, prep.ninja_file
    )
    built = sorted(dist.glob("*.whl"))
    if len(built) != 1:
        raise FaShimError(
            f"upstream bdist_wheel produced {len(built)} wheels in {dist}.",
            fix=f"read the log: {prep.log}",
        )
    return built[0]


def fresh_wheel(plan: Plan, tools: Tools, scratch: Path, how: dict | None = None) -> Path:
    """Prepare, compile, repack and verify: a checked wheel, still in scratch. `how` receives
    what describes this run rather than the wheel (the cache entry's record)."""
    # a compiler cache shared by nodes: the same source path everywhere, sccache's hit rate;
    # CUDA device code records its source path (_reproducible): the same path for every build
    shared = _sccache.is_sccache(tools.compiler_cache) or tools.nvcc is not None
    place = _stable_src.place(scratch, shared, plan.settings.keep_build_dir)
    with place as where, _sccache.session(tools.compiler_cache):
        prep = prepare(plan, where, tools)
        with _progress.watching(plan, prep):  # the estimate block, then progress a user can see
            upstream_wheel = run_upstream_build(plan, prep)
        started = time.monotonic()  # repacked before the source place goes
        target = scratch / "wheel" / plan.wheel_name
        in_wheel, this_run = _reproducible.split(provenance(plan, prep))
        wheel = repack(plan, upstream_wheel, target, in_wheel)
        if how is not None:
            how.update(this_run, compiled_in=str(where), **_reproducible.circumstances())
    _log.info(f"repacked as {wheel.name} ({time.monotonic() - started:.1f} s)")
    verify(plan, wheel)  # a wheel that fails is neither published nor cached
    return wheel


def verify(plan: Plan, wheel: Path) -> None:
    started = time.monotonic()
    report = _verify.verify_wheel(wheel, plan.torch)
    report.raise_for_failures()
    _log.info(
        f"verified {wheel.name} against torch {plan.torch.version}: {report.summary()} "
        f"({time.monotonic() - started:.1f} s)"
    )


@contextlib.contextmanager
def scratch_dir(settings: _settings.Settings) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fa-shim-build-"))
    try:
        yield path
    finally:
        if settings.keep_build_dir:
            _log.info(f"kept the build directory {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


def build(plan: Plan, wheel_directory: str, metadata_directory: str | None) -> str:
    if metadata_directory:
        check_prepared_metadata(plan, metadata_directory)
    out_dir = Path(wheel_directory).absolute()
    tools = toolchain(plan)
    _space.before_compile(plan, tools, out_dir)
    with scratch_dir(plan.settings) as scratch:
        if plan.settings.wheel_cache:
            how: dict = {}
            path = _wheel_cache.obtain(
                plan.settings.resolved_wheel_cache_dir,
                fingerprint(plan, tools),
                plan.wheel_name,
                out_dir,
                lambda wheel: _verified.once(
                    plan.settings.resolved_cache_dir, wheel, plan.torch, lambda: verify(plan, wheel)
                ),
                lambda: fresh_wheel(plan, tools, scratch, how),
                plan.settings.wheel_cache_lock_timeout,
                plan.settings.wheel_cache_heartbeat,
                built=lambda: how,
            )
        else:
            path = publish(fresh_wheel(plan, tools, scratch), out_dir)
    _log.info(f"built {path}")
    return path.name
