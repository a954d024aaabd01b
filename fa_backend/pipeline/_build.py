"""The pipeline behind the hooks: toolchain, prepare (build.ninja written, nothing compiled), the
upstream build, repack, verify, and build, which runs them through the wheel cache. Every step
asks the plan's flavour (flavours/_interface) what differs between flavours, never which it is."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import shutil
import sysconfig
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ..core import _atomic, _failures, _log, _scratch
from ..core._digest import sha256_of
from ..core._errors import FaShimError
from ..core._version import __version__
from ..flavours._interface import Plan, Tools
from ..fleet import _objects, _sccache, _stable_src, _wheel_cache
from ..settings import _settings
from ..toolchain import _compile_commands, _compilers, _jobs, _preflight, _space, _toolkit
from ..toolchain._torch import TorchInfo
from ..wheel import _metadata
from ..wheel._wheelfile import WheelWriter
from . import _compile_plan, _progress, _reproducible, _stats, _upstream
from ._compile_plan import Prepared
from ._plan import check_prepared_metadata, plan, write_metadata
from ._provenance import GUARD, PROVENANCE, fa_shim_sources, fingerprint, provenance

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


def toolchain(plan: Plan) -> Tools:
    """nvcc (the system's, or one from the index), the architectures and the compile jobs."""
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
    cache = _compilers.compiler_cache(s.compiler_cache)
    if cache:
        _sccache.check_nvcc(cache, nvcc)
        _log.info(f"compiling through the compiler cache {cache}")
    threads = sizing.threads if nvcc else None
    return Tools(nvcc, archs, sizing.jobs, threads, cache, sizing.shape)


def prepare(
    plan: Plan, scratch: Path, tools: Tools | None = None, audit: Path | None = None
) -> Prepared:
    """Lay out and patch the sources, let torch write build.ninja (nothing compiled), check it;
    `audit`: the object cache compares each compile there and serves none (object_cache)."""
    tools = tools or toolchain(plan)
    log_dir = plan.settings.resolved_cache_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"flash-attn-{plan.version}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    shutil.rmtree(scratch / "src", ignore_errors=True)  # a prepare into a used directory
    source = plan.flavour.lay_out(plan, tools, scratch / "src")
    _reproducible.settle_times(scratch / "src")
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
    if plan.tag.abi == "abi3":
        _compile_commands.verify_limited_api(commands, plan.tag.interpreter, ninja_file)
    if plan.stable_abi:
        _compile_commands.verify_stable_target(commands, plan.stable_abi, ninja_file)
    plan.flavour.check(plan, tools, commands)
    # the launcher's records, where the upstream run keeps them (Prepared.stats_file)
    _preflight.check(commands, ninja_file.parent, stats=_stats.stats_file(source.parent))
    sources = _progress.build_sources(commands)
    units = _compile_plan.make(
        plan, tools, sources, _jobs.available_cores(), _jobs.available_memory()
    )
    _compile_plan.apply(ninja_file, units)
    tools = dataclasses.replace(tools, jobs=units.jobs)
    cached = object_cache(plan, tools, source, commands, audit)
    return Prepared(source, tools, ninja_file, commands, report, log, units, cached)


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


def run_upstream_build(plan: Plan, prep: Prepared) -> Path:
    """Run upstream's bdist_wheel, again with a lowered compile plan after an out-of-memory kill
    (ninja keeps the objects already compiled); upstream's wheel, in the scratch."""
    dist = prep.source.parent / "dist"
    units = prep.compile_plan or _compile_plan.CompilePlan.jobs_only(prep.tools.jobs)
    started = time.monotonic()
    while True:
        code, output, report = _upstream.run_setup(
            plan, prep.tools, prep.source, dist, "wheel", prep.log, units.jobs, units.driver_spec()
        )
        if code == 0:
            break
        lowered = units.lowered() if _upstream.killed_for_memory(output) else None
        if lowered is None:
            raise _upstream.failure(code, report, prep.log, output)
        done = len(_stats.compiled(prep.stats_file))
        _log.warn(_compile_plan.retry_message(units, lowered, done))
        units = lowered
    stats = _stats.compiled(prep.stats_file)
    _log.info(
        f"upstream build: {time.monotonic() - started:.0f} s, of which "
        f"{_stats.compile_span(stats):.0f} s compiling {len(stats)} translation units"
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


# upstream's .dist-info files that travel into ours; the rest (METADATA, WHEEL, RECORD) we write
_KEPT_DIST_INFO = ("licenses/", "LICENSE", "AUTHORS")


def repack(plan: Plan, upstream_wheel: Path, target: Path, prov: dict) -> Path:
    """Upstream's files, streamed (never read whole), with our .dist-info (METADATA, tags,
    provenance, RECORD) and the runtime guard."""
    writer = WheelWriter(target, plan.dist_info)
    names = plan.names
    has_module = False
    with zipfile.ZipFile(upstream_wheel) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            top = info.filename.split("/", 1)[0]
            if top.endswith(".dist-info"):
                rest = info.filename.split("/", 1)[1]
                if rest.startswith(_KEPT_DIST_INFO) or rest == "top_level.txt":
                    writer.add_stream(f"{plan.dist_info}/{rest}", _member(zf, info), info.file_size)
                continue
            has_module |= info.filename.startswith(names.module_path + ".") and (
                info.filename.endswith(".so")
            )
            mode = (info.external_attr >> 16) & 0o777 or 0o644
            writer.add_stream(info.filename, _member(zf, info), info.file_size, mode)
        if not has_module:
            raise FaShimError(
                f"the upstream wheel contains no compiled {names.module_path}*.so; it "
                f"would fail with \"No module named '{names.module}'\".",
                fix="read the build log; was FLASH_ATTENTION_SKIP_CUDA_BUILD set?",
            )
        writer.add(names.guard_path, GUARD.read_bytes())
        writer.add(f"{plan.dist_info}/METADATA", plan.metadata.encode())
        writer.add(
            f"{plan.dist_info}/WHEEL",
            _metadata.wheel_file(plan.tag, f"fa-shim {__version__}").encode(),
        )
        writer.add(
            f"{plan.dist_info}/{PROVENANCE}",
            (json.dumps(prov, indent=2, sort_keys=True) + "\n").encode(),
        )
        return writer.write()  # while upstream's wheel is open: its members stream from it


def _member(zf: zipfile.ZipFile, info: zipfile.ZipInfo):
    return lambda: zf.open(info)


def fresh_wheel(
    plan: Plan, tools: Tools, scratch: Path, how: dict | None = None, audit: Path | None = None
) -> Path:
    """Prepare, compile, repack and verify: a checked wheel in scratch; `how` receives what
    describes this run rather than the wheel (the cache entry's record); `audit`: prepare's."""
    # a compiler cache shared by nodes: the same source path everywhere, sccache's hit rate;
    # CUDA device code records its source path (_reproducible): the same path for every build
    shared = _sccache.is_sccache(tools.compiler_cache) or tools.nvcc is not None
    sources = plan.flavour.sources(plan, with_origin=False)
    place = _stable_src.place(scratch, shared, sources, plan.settings.keep_build_dir)
    with place as where, _sccache.session(tools.compiler_cache):
        with _failures.doing(f"preparing the sources in {where}"):
            prep = prepare(plan, where, tools, audit)
        with _progress.watching(plan, prep), _failures.doing(f"building in {prep.source}"):
            upstream_wheel = run_upstream_build(plan, prep)  # the estimate, then progress
        started = time.monotonic()  # repacked before the source place goes
        target = scratch / "wheel" / plan.wheel_name
        in_wheel, this_run = _reproducible.split(provenance(plan, prep), plan.flavour)
        with _failures.doing(f"repacking the wheel into {target}"):
            wheel = repack(plan, upstream_wheel, target, in_wheel)
        if how is not None:
            how.update(this_run, compiled_in=str(where), **_reproducible.circumstances())
    _log.info(f"repacked as {wheel.name} ({time.monotonic() - started:.1f} s)")
    # a wheel that fails is neither published nor cached; one that passes is recorded, so its
    # first wheel-cache hit is not verified again (the same bytes against the same torch)
    verify_once(plan.settings.resolved_cache_dir, wheel, plan.torch, lambda: verify(plan, wheel))
    return wheel


def verify(plan: Plan, wheel: Path) -> None:
    from ..verify import _verify  # not on a hit whose bytes passed before (verify_once)

    started = time.monotonic()
    report = _verify.verify_wheel(wheel, plan.torch)
    report.raise_for_failures()
    _log.info(
        f"verified {wheel.name} against torch {plan.torch.version}: {report.summary()} "
        f"({time.monotonic() - started:.1f} s)"
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


@contextlib.contextmanager
def scratch_dir(settings: _settings.Settings) -> Iterator[Path]:
    with _scratch.directory("build", keep=settings.keep_build_dir) as path:
        try:
            yield path
        finally:
            if settings.keep_build_dir:
                _log.info(f"kept the build directory {path}")


def check_space(plan: Plan, tools: Tools, out_dir: Path, compiling: bool = True) -> None:
    """The output directory; when compiling, scratch too. Not the wheel cache: one that cannot
    keep the wheel costs a warning, not the build (fleet/_wheel_cache.obtain)."""
    peak, wheel = plan.flavour.disk_needs(plan, tools)
    needs = [("scratch", Path(tempfile.gettempdir()), peak)] if compiling else []
    needs.append(("the wheel", out_dir, wheel))
    _space.require(needs)


def build(plan: Plan, wheel_directory: str, metadata_directory: str | None) -> str:
    if metadata_directory:
        check_prepared_metadata(plan, metadata_directory)
    out_dir = Path(wheel_directory).absolute()
    if plan.settings.wheel_cache:
        _wheel_cache.check_root(plan.settings.resolved_wheel_cache_dir)
    tools = toolchain(plan)
    check_space(plan, tools, out_dir, compiling=not plan.settings.wheel_cache)
    with scratch_dir(plan.settings) as scratch:
        if plan.settings.wheel_cache:
            how: dict = {}
            facts = fingerprint(plan, tools)

            def miss() -> Path:
                check_space(plan, tools, out_dir)
                return fresh_wheel(plan, tools, scratch, how)

            path = _wheel_cache.obtain(
                plan.settings.resolved_wheel_cache_dir,
                facts,
                plan.wheel_name,
                out_dir,
                lambda wheel: verify_once(
                    plan.settings.resolved_cache_dir, wheel, plan.torch, lambda: verify(plan, wheel)
                ),
                miss,
                plan.settings.wheel_cache_lock_timeout,
                plan.settings.wheel_cache_heartbeat,
                built=lambda: how,
                torch_version=plan.torch.version,
                variants=plan.settings.wheel_variants,
            )
        else:
            path = _wheel_cache.deliver(fresh_wheel(plan, tools, scratch), out_dir)
    _log.info(f"built {path}")
    return path.name
