"""The pipeline behind the hooks: plan (cheap: settings, torch, sdist, names), then build."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

from packaging import tags

from . import (
    _archs,
    _atomic,
    _compile_commands,
    _jobs,
    _kernels,
    _log,
    _metadata,
    _patches,
    _requirements,
    _runner,
    _sdist,
    _settings,
    _toolchain,
    _toolkit,
    _torch,
    _tu_parts,
    _upstream,
    _verify,
    _wheel_cache,
)
from ._errors import FaShimError
from ._wheelfile import WheelWriter, publish

PROVENANCE = "fa_shim_provenance.json"
GUARD = Path(__file__).with_name("_runtime_guard.py")  # shipped as flash_attn/_fa_shim_guard.py


def fa_shim_version() -> str:
    from . import __version__

    return __version__


@dataclasses.dataclass(frozen=True)
class Plan:
    settings: _settings.Settings
    torch: _torch.TorchInfo
    sdist: _sdist.Sdist
    patches: tuple[_patches.Patch, ...]
    version: str
    tag: tags.Tag
    metadata: str
    tailoring: _kernels.Tailoring = _kernels.FULL

    @property
    def dist_info(self) -> str:
        return _metadata.dist_info_name(self.version)

    @property
    def wheel_name(self) -> str:
        return _metadata.wheel_filename(self.version, self.tag)


def plan(config_settings: _settings.ConfigSettings | None) -> Plan:
    settings = _settings.load(config_settings)
    _log.set_verbose(settings.verbose)
    _requirements.check()
    why = _atomic.unwritable(settings.resolved_cache_dir)  # sdists and logs go there
    if why:
        raise FaShimError(
            f"fa-shim's cache directory {settings.resolved_cache_dir} is not writable ({why}).",
            fix="point -C cache-dir=DIR (or XDG_CACHE_HOME) at a writable directory.",
        )
    torch = _torch.probe(settings.torch_python, settings.resolved_cache_dir / "torch-probes")
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
    (target / "METADATA").write_text(plan.metadata, encoding="utf-8")
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


@dataclasses.dataclass(frozen=True)
class Tools:
    """The toolchain decisions of one build, made once: they feed the child's environment, the
    wheel-cache fingerprint and the provenance."""

    nvcc: _toolchain.Nvcc | None
    archs: _archs.ArchChoice | None
    jobs: int
    nvcc_threads: int | None
    compiler_cache: str | None
    tu_parts: int = 1  # forward kernel sources compiled as this many parts (see _tu_parts)

    @staticmethod
    def stats_file(scratch: Path) -> Path:
        return scratch / "compile-stats.jsonl"


def toolchain(plan: Plan) -> Tools:
    s = plan.settings
    nvcc = archs = None
    if _sdist.has_cuda_sources(plan.sdist):
        nvcc = _toolkit.choose(plan.torch, s)  # the system's, or one from the index
        _log.info(f"using nvcc {nvcc.describe()}, CUDA_HOME={nvcc.cuda_home}")
        archs = _archs.resolve(s, plan.torch, nvcc.path, plan.sdist.version, os.environ)
    n_archs = len(archs.targets) if archs else 1
    kernels = (
        sorted(_kernels.expected_kernels(plan.tailoring, plan.sdist.version))
        if plan.sdist.version in _kernels.SPACES
        else None
    )
    # idle job slots become parts of the forward sources, and the parts more jobs
    parts = _tu_parts.choose(
        s.tu_parts,
        _jobs.plan_jobs(
            _jobs.available_cores(), _jobs.available_memory(), n_archs, s.max_jobs, s.nvcc_threads
        )[0],
        kernels,
        _tu_parts.supported(p.name for p in plan.patches),
    )
    # the kernel TUs and flash_api.cpp, all compiled at once when cores and memory allow
    n_sources = _tu_parts.count_sources(kernels, parts) + 1 if kernels else None
    env = _jobs.env_for(s, n_archs, n_sources)
    threads = int(env["NVCC_THREADS"]) if nvcc else None
    if parts > 1:
        _log.info(f"compiling each forward kernel source as {parts} parts (-C tu-parts)")
    cache = _toolchain.compiler_cache(s.compiler_cache)
    if cache:
        _log.info(f"compiling through the compiler cache {cache}")
    return Tools(nvcc, archs, int(env["MAX_JOBS"]), threads, cache, parts)


@dataclasses.dataclass
class Prepared:
    """An extracted, patched source tree whose build.ninja torch has written."""

    source: Path
    tools: Tools
    ninja_file: Path
    commands: list[_compile_commands.Command]
    report: dict
    log: Path

    @property
    def stats_file(self) -> Path:
        """Where the compiler launcher records each TU (the upstream run's scratch)."""
        return Tools.stats_file(self.source.parent)


def prepare(plan: Plan, scratch: Path, tools: Tools | None = None) -> Prepared:
    """Extract, patch and let torch write build.ninja (nothing compiled), then check it."""
    tools = tools or toolchain(plan)
    log_dir = plan.settings.resolved_cache_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"flash-attn-{plan.version}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    shutil.rmtree(scratch / "src", ignore_errors=True)  # a prepare into a used directory
    source = _sdist.extract(plan.sdist, scratch / "src")
    _patches.apply_all(list(plan.patches), source)
    _tu_parts.write(source / _tu_parts.KERNEL_DIR, tools.tu_parts)
    code, output, report = _upstream.run(plan, tools, source, scratch / "dist", "prepare", log)
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
    if tools.archs:
        _archs.check_gencodes(commands, tools.archs.targets)
    _kernels.check_sources(commands, plan.tailoring, plan.sdist.version)
    return Prepared(source, tools, ninja_file, commands, report, log)


def compile_wheel(plan: Plan, prep: Prepared, scratch: Path) -> Path:
    """Run the real build; on an out-of-memory kill, again with half the jobs (ninja keeps the
    objects already compiled). Returns the repacked wheel, still in scratch."""
    dist = scratch / "dist"
    jobs = prep.tools.jobs
    started = time.monotonic()
    while True:
        code, output, report = _upstream.run(
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
    started = time.monotonic()
    wheel = repack(plan, built[0], scratch / "wheel" / plan.wheel_name, provenance(plan, prep))
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


def fingerprint(plan: Plan, tools: Tools) -> dict:
    """Everything that decides what the wheel computes; jobs, threads and tu-parts do not
    (parts change how the objects are cut, not a kernel), so machines of any size share it."""
    env = (
        "CXX",
        "CC",
        "CFLAGS",
        "CXXFLAGS",
        "CPPFLAGS",
        "LDFLAGS",
        "NVCC_APPEND_FLAGS",
        "NVCC_PREPEND_FLAGS",
        "NVCC_CCBIN",
        "PYTORCH_NVCC",
    )
    return {
        "wheel": plan.wheel_name,
        "metadata": hashlib.sha256(plan.metadata.encode()).hexdigest(),  # Requires-Dist & co.
        "fa_shim": fa_shim_version(),
        "sdist_sha256": plan.sdist.sha256,
        "patches": [p.sha256 for p in plan.patches],
        "guard": hashlib.sha256(GUARD.read_bytes()).hexdigest(),
        "torch": [plan.torch.version, plan.torch.cuda, plan.torch.abi, plan.torch.cxx_std],
        "nvcc": str(tools.nvcc.version) if tools.nvcc else None,
        "nvcc_build": _toolchain.nvcc_build(tools.nvcc.path) if tools.nvcc else None,
        "archs": list(tools.archs.targets) if tools.archs else None,
        "kernel_set": plan.tailoring.describe(),
        "host_compiler": _toolchain.host_compiler()["version"],
        "env": {name: os.environ.get(name) for name in env},
    }


def provenance(plan: Plan, prep: Prepared) -> dict:
    archs = sorted(
        {
            m.group(1)
            for c in prep.commands
            for g in c.values("-gencode")
            for m in [re.search(r"code=sm_(\w+)", g)]
            if m
        }
    )
    return {
        "fa_shim_version": fa_shim_version(),
        "flash_attn_version": plan.sdist.version,
        "sdist": {
            "sha256": plan.sdist.sha256,
            "pinned": plan.sdist.pinned,
            "origin": plan.sdist.origin,
            "file": plan.sdist.path.name,
        },
        "wheel_version": plan.version,
        "python_tag": str(plan.tag),
        "torch": {
            "version": plan.torch.version,
            "cuda": plan.torch.cuda,
            "cxx11_abi": plan.torch.abi,
            "cxx_std": plan.torch.cxx_std,
            "path": plan.torch.package_dir,
        },
        "nvcc": {
            "path": str(prep.tools.nvcc.path),
            "version": str(prep.tools.nvcc.version),
            "cuda_home": str(prep.tools.nvcc.cuda_home),
            "origin": prep.tools.nvcc.origin,
            "build": _toolchain.nvcc_build(prep.tools.nvcc.path),
            "toolkit": _toolkit.manifest_of(prep.tools.nvcc),
        }
        if prep.tools.nvcc
        else None,
        "cuda_arch_choice": prep.tools.archs.describe() if prep.tools.archs else None,
        "compiler_cache": prep.tools.compiler_cache,
        "tu_parts": prep.tools.tu_parts,
        "host_compiler": _toolchain.host_compiler(),
        "cuda_archs": archs,
        "injected_flags": prep.report.get("extensions", []),
        "patches": [{"name": p.name, "reason": p.reason, "sha256": p.sha256} for p in plan.patches],
        "kernel_set": plan.tailoring.describe(),
        "compile_commands": {
            "cxx": sum(c.kind == "cxx" for c in prep.commands),
            "nvcc": sum(c.kind == "nvcc" for c in prep.commands),
        },
    }


@contextlib.contextmanager
def scratch_dir(settings: _settings.Settings):
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
    with scratch_dir(plan.settings) as scratch:
        if not plan.settings.wheel_cache:
            path = publish(_compile(plan, tools, scratch), out_dir)
        else:
            root = plan.settings.resolved_wheel_cache_dir
            facts = fingerprint(plan, tools)
            key = _wheel_cache.key(facts)
            read_only = _atomic.unwritable(root)  # e.g. shared storage mounted read-only
            if read_only:
                _log.warn(f"the wheel cache {root} is not writable ({read_only}): only reading it")
            with contextlib.nullcontext() if read_only else _wheel_cache.locked(root, key):
                wheel = _from_cache(plan, tools, scratch, root, key, facts, not read_only)
                path = publish(wheel, out_dir)  # only a complete wheel appears in out_dir
    _log.info(f"built {path}")
    return path.name


def _from_cache(
    plan: Plan, tools: Tools, scratch: Path, root: Path, key: str, facts: dict, writable: bool
) -> Path:
    """The cached wheel, verified; else a fresh build, stored when the cache is writable."""
    cached = _wheel_cache.lookup(root, key, plan.wheel_name)
    if cached:
        _log.info(f"wheel cache hit: {cached} (fingerprint {key})")
        try:
            verify(plan, cached)  # a damaged entry is never installed
            return cached
        except FaShimError as exc:
            _log.warn(f"the cached wheel failed its check ({exc.cause}); building it again")
            if writable:
                _wheel_cache.evict(root, key)
    wheel = _compile(plan, tools, scratch)
    if not writable:
        return wheel
    _wheel_cache.clear_partials(root, key)
    return _wheel_cache.store(root, key, wheel, facts)


def _compile(plan: Plan, tools: Tools, scratch: Path) -> Path:
    return compile_wheel(plan, prepare(plan, scratch, tools), scratch)


def repack(plan: Plan, upstream_wheel: Path, target: Path, prov: dict) -> Path:
    """Upstream's files with our .dist-info: our METADATA, tags, provenance, RECORD."""
    writer = WheelWriter(target, plan.dist_info)
    has_module = False
    with zipfile.ZipFile(upstream_wheel) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            top = info.filename.split("/", 1)[0]
            if top.endswith(".dist-info"):
                rest = info.filename.split("/", 1)[1]
                if rest.startswith(("licenses/", "LICENSE", "AUTHORS")) or rest == "top_level.txt":
                    writer.add(f"{plan.dist_info}/{rest}", zf.read(info))
                continue
            name = info.filename.rsplit("/", 1)[-1]
            has_module |= name.startswith("flash_attn_2_cuda") and name.endswith(".so")
            writer.add(info.filename, zf.read(info), (info.external_attr >> 16) & 0o777 or 0o644)
    if not has_module:
        raise FaShimError(
            "the upstream wheel contains no compiled flash_attn_2_cuda*.so; it would "
            "fail with \"No module named 'flash_attn_2_cuda'\".",
            fix="read the build log; was FLASH_ATTENTION_SKIP_CUDA_BUILD set?",
        )
    writer.add("flash_attn/_fa_shim_guard.py", GUARD.read_bytes())
    writer.add(f"{plan.dist_info}/METADATA", plan.metadata.encode())
    writer.add(
        f"{plan.dist_info}/WHEEL",
        _metadata.wheel_file(plan.tag, f"fa-shim {fa_shim_version()}").encode(),
    )
    writer.add(
        f"{plan.dist_info}/{PROVENANCE}",
        (json.dumps(prov, indent=2, sort_keys=True) + "\n").encode(),
    )
    return writer.write()
