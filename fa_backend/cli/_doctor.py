"""`python -m fa_backend doctor`: what a build here would use, and what is wrong with it, each
finding from the build's own code or a real probe of the tool, each problem with its fix.
Nothing is compiled or downloaded: without local sources the prediction says so and stops."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
from collections.abc import Iterator
from pathlib import Path

from ..core import _atomic, _log
from ..core._errors import FaShimError, NotLocal
from ..flavours import _registry
from ..flavours._interface import Flavour, Plan, Tools
from ..fleet import _cached, _objects, _wheel_cache
from ..pipeline import api as pipeline
from ..resources import PROJECT
from ..toolchain import _jobs, _preflight, _requirements
from ..toolchain._compile_commands import ABI_DEFINE, Command
from ..verify import _verify
from ..verify._elf import CudaCode
from ..verify._report import ERROR, WARNING
from . import _toolchain_sections
from ._toolchain_sections import DoctorReport

HIT_SECONDS = "3-5 s"  # recorded cache hits (docs/benchmarks.md): the copy and its verify


@contextlib.contextmanager
def in_project(path: Path) -> Iterator[None]:
    """The build reads [tool.fa-shim] of the project it runs in (cwd)."""
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def requirements_section(report) -> None:
    """fa-shim's build requirements, checked exactly as a --no-build-isolation build does."""
    unmet = _requirements.unmet()
    if not unmet:
        names = ", ".join(str(r) for r in _requirements.requirements())
        report.add("requires", {"unmet": []}, f"all installed ({names})")
        return
    report.add("requires", {"unmet": unmet}, "MISSING: " + ", ".join(unmet))
    try:
        _requirements.check()
    except FaShimError as exc:  # the build's own message and fix (torch's constraints kept)
        report.problem("requires", ERROR, "a build would stop at once: " + exc.cause, exc.fix or "")


def _stop(report, data: dict, exc: FaShimError, plan_refused: bool = False) -> None:
    """The build would stop here: an error unless the report has one (no double count), or for
    the plan's own refusal (fixing the others leaves it standing) one no check states."""
    data["stops"] = exc.cause
    report.add("build", data, f"a build would stop: {exc.cause}")
    if report.ok or (
        plan_refused and not any(c.summary.endswith(exc.cause) for c in report.checks)
    ):
        report.problem("build", ERROR, "a build would stop: " + exc.cause, exc.fix or "")


def planned(project: Path) -> tuple[Plan | None, Tools | None, FaShimError | None]:
    """The build's own plan and toolchain here, offline (doctor never downloads), or what
    stopped them; the plan is None when it was the plan that stopped."""
    plan = None
    try:
        with in_project(project):  # pip runs the backend there: its [tool.fa-shim] counts
            plan = pipeline.plan({"offline": "true"})
            return plan, _cached.toolchain(plan), None
    except FaShimError as exc:
        return plan, None, exc


def build_section(report, project: Path, plan, tools, exc: FaShimError | None) -> None:
    """The wheel, kernel set, architectures, estimate and wheel-cache state of a build here."""
    data: dict = {}
    # doctor's own offline: a build stops at missing sources only where the user's is offline
    if plan is None and isinstance(exc, NotLocal):
        with in_project(project):
            if _registry.load_settings({}).offline:
                _stop(report, data, exc)
                return
        data["downloads"] = exc.cause
        report.add(
            "build",
            data,
            "the sources are not on this machine: a build downloads them first",
            "(run doctor again afterwards for the estimate and the wheel-cache state)",
        )
        return
    if plan is not None:
        data.update(wheel=plan.wheel_name, kernel_set=plan.kernel_set)
    if exc is not None:
        _stop(report, data, exc, plan_refused=plan is None)
        return
    lines = [plan.wheel_name]
    data["archs"] = list(tools.archs.targets) if tools.archs else None
    sources = plan.flavour.planned_sources(plan, tools)
    if sources is not None:
        preview = pipeline.preview(plan, tools, sources, _jobs.available_cores())
        data["estimate_s"] = round(preview.seconds) if preview.seconds is not None else None
        data["sources"] = len(sources)
        first, *rest = preview.lines  # what a build prints before compiling
        lines += [first.replace("about to compile", "would compile"), *(r.strip() for r in rest)]
    else:
        lines.append(
            f"kernel set {plan.flavour.kernel_set_name(plan)}; no estimate: fa-shim does not "
            f"know {plan.names.dist} {plan.flavour.upstream_version(plan)}'s kernel sources",
        )
    if not plan.settings.wheel_cache:
        data["cache"] = "off"
        lines.append("wheel cache off (-C wheel-cache=false): every build compiles")
    else:
        root = plan.settings.resolved_wheel_cache_dir
        key = _wheel_cache.key(pipeline.fingerprint(plan, tools))
        hit = _wheel_cache.lookup(root, key, plan.wheel_name)
        data.update(cache="hit" if hit else "miss", cache_key=key, cached=str(hit) if hit else None)
        lines.append(
            f"would be a wheel-cache hit: {hit} (~{HIT_SECONDS}, no compile)"
            if hit
            else f"not in the wheel cache {root} (fingerprint {key}): a build compiles"
        )
    report.add("build", data, *lines)


def preflight_section(report, torch, nvcc) -> None:
    """The build's preflight probe, run on the flags fa-shim injects into CXX and nvcc."""
    if torch is None:
        return
    flags = [f"-std={torch.cxx_std}", f"{ABI_DEFINE}{torch.abi}"]
    cxx = [*shlex.split(os.environ.get("CXX", "c++")), *flags, "-fPIC", "-c", "x.cpp", "-o", "x.o"]
    commands = [Command("cxx", "x.cpp", tuple(cxx))]
    if nvcc is not None:
        ccbin = ["-ccbin", os.environ["NVCC_CCBIN"]] if os.environ.get("NVCC_CCBIN") else []
        argv = [str(nvcc.path), *ccbin, *flags, "-Xcompiler", "-fPIC", "-c", "x.cu", "-o", "x.o"]
        commands.append(Command("nvcc", "x.cu", tuple(argv)))
    try:
        results = _preflight.check(commands, Path.cwd())
    except FaShimError as exc:
        report.add("preflight", {"ok": False, "error": exc.cause}, "FAILED (see problems)")
        report.problem("preflight", ERROR, exc.cause, exc.fix or "")
        return
    text = ", ".join(f"{r['kind']} abi={r['abi']} __cplusplus={r['cplusplus']}" for r in results)
    report.add("preflight", {"ok": True, "results": json.loads(json.dumps(results))}, text)


def archs_to_compile(flavour, settings, torch, nvcc) -> tuple[list[str], str]:
    """The sm_XX a build would compile: the build's own choice (the flavour's archs)."""
    # the settings did not load (doctor then has empty ones): no version to map onto
    if not settings.flash_attn_version and not settings.given:
        return [], "unknown: no flash-attn version configured"
    try:
        choice = flavour.archs(settings, torch, nvcc.path)
    except FaShimError as exc:
        return [], f"none: {exc.cause}"
    return list(choice.targets), str(choice.selection.source)


def _machine_and_gpus(
    report: DoctorReport, flavour: Flavour, settings, torch, nvcc, tools, exc
) -> list[_verify.Gpu] | None:
    if nvcc is None:
        archs, tools = [], None
        source = why = "no usable nvcc" if torch is not None and torch.cuda else "no CUDA torch"
    else:
        archs, source = archs_to_compile(flavour, settings, torch, nvcc)
        why = exc.cause.rstrip(".") if exc else ""
        if isinstance(exc, NotLocal):
            why = "the sources are not on this machine yet"
    cores, memory = _jobs.available_cores(), _jobs.available_memory()
    if tools is not None:  # the build's own decision for this configuration
        jobs, threads, shape = tools.jobs, tools.nvcc_threads, dict(tools.shape)
        note = flavour.shape_note(tools.shape)
        sized = "the build's own sizing for this configuration" + (f", {note}" if note else "")
    else:  # no build could start here: what a full build would get
        jobs, threads = _jobs.plan_jobs(
            cores, memory, len(archs) or 1, settings.max_jobs, settings.nvcc_threads
        )
        shape, sized = {}, f"sized for a full build: {why}"
    report.add(
        "machine",
        {
            "cores": cores,
            "available_memory_gib": round(memory / _jobs.GIB, 1),
            "jobs": jobs,
            "nvcc_threads": threads,
            **shape,
            "sized": sized,
        },
        f"{cores} cores, {_jobs.gib(memory)} available -> {jobs} compile job(s) x "
        f"{threads} nvcc thread(s)",
        f"({sized}; override with -C max-jobs=N -C nvcc-threads=N)",
    )
    if memory < _jobs.job_bytes(1):
        report.problem(
            "machine",
            WARNING,
            f"only {_jobs.gib(memory)} of memory is available; one nvcc job compiling a "
            f"flash-attn kernel may take {_jobs.job_bytes(1) / _jobs.GIB:.0f} GiB and the build "
            "may be killed (OOM).",
            "free memory, or build fewer kernels and architectures: -C max-jobs=1 "
            "-C nvcc-threads=1 -C cuda-archs=<your GPU> (and -C head-dims=... for a tailored "
            "build).",
        )

    gpus: list[_verify.Gpu] | None = None
    try:
        gpus = _verify.gpus_here()
    except Exception as exc:  # torch not importable in this process (e.g. torch-python)
        _log.debug(f"no GPU query: {exc}")
    if gpus is None:
        gpu_line = "not queried (torch is not importable by this interpreter)"
    elif not gpus:
        gpu_line = "none visible (torch.cuda.is_available() is False)"
    else:
        gpu_line = ", ".join(f"{g.index}: {g.name} (sm_{g.sm})" for g in gpus)
    compiled = f"sm_{', sm_'.join(archs)} (from {source})" if archs else f"nothing ({source})"
    report.add(
        "gpus",
        {
            "visible": [dataclasses.asdict(g) for g in gpus or []],
            "compile_archs": archs,
            "archs_source": source,
        },
        gpu_line,
        f"a build would compile {compiled}",
    )
    for gpu in gpus or []:
        unsupported = flavour.unsupported_gpu(gpu.sm)
        if unsupported:
            why, fix = unsupported
            report.problem(
                "gpus",
                ERROR,
                f"GPU {gpu.index} ({gpu.name}) has compute capability {gpu.capability[0]}."
                f"{gpu.capability[1]}; {why}.",
                fix,
            )
        elif archs and not any(CudaCode.sass(a).runs_on(gpu.sm) for a in archs):
            report.problem(
                "gpus",
                ERROR,
                f"a build would compile sm_{', sm_'.join(archs)}, none of which runs on GPU "
                f"{gpu.index} ({gpu.name}, sm_{gpu.sm}).",
                f"build for it: -C cuda-archs={gpu.sm}.",
            )
    return gpus


def _installed_section(report: DoctorReport, flavour: Flavour, torch, gpus) -> None:
    from importlib import metadata

    names = flavour.names
    try:
        dist = metadata.distribution(names.dist)
    except metadata.PackageNotFoundError:
        report.add("flash_attn", {"installed": False}, "not installed")
        return
    where = str(Path(dist.locate_file("")).resolve())
    found = {"installed": True, "version": dist.version, "location": where}
    if torch is None:
        report.add(
            "flash_attn",
            {**found, "verified": None},
            f"{dist.version} at {where}; not verified (no torch)",
        )
        return
    try:
        result = _verify.verify_path(names.package, torch, gpus)
    except FaShimError as exc:
        report.add("flash_attn", {"installed": True, "error": exc.cause}, f"{dist.version}: ?")
        report.problem("flash_attn", ERROR, exc.cause, exc.fix or "")
        return
    failed = [c.name for c in result.failures]
    report.add(
        "flash_attn",
        {**found, "verified": result.ok, "failed_checks": failed},
        f"{dist.version} at {where}: "
        + ("verifies against this torch" if result.ok else f"FAILS verify ({', '.join(failed)})"),
    )
    if failed:
        report.problem(
            "flash_attn",
            ERROR,
            f"the installed {names.dist} {dist.version} does not fit torch {torch.version}: "
            + "; ".join(f"{c.name}: {c.summary}" for c in result.failures),
            (result.failures[0].fix or flavour.rebuild_command())
            + f" (details: `python -m fa_backend verify {names.package}`)",
        )


def cannot_write(path: Path) -> str | None:
    """Why a build could not write into path, made nowhere here: probed in the nearest
    directory at or above it (a file in the way says so)."""
    for here in (path, *path.parents):
        if here.is_dir():
            why = _atomic.unwritable(here)
            return f"{why}: {here}" if why else None
        if here.exists() or here.is_symlink():
            return f"a file is in the way: {here} is not a directory"
    return None


def caches_section(report: DoctorReport, settings, objects: Path) -> None:
    """A cache a build cannot write (read-only, full, over quota, a file in the way) degrades
    that build to compiling and keeping nothing there: an error, with the setting that fixes it."""
    wheels = settings.resolved_wheel_cache_dir
    for on, what, path, off in (
        (settings.wheel_cache, "wheel cache", wheels, "wheel-cache=false"),
        (settings.object_cache, "object cache", objects, "object-cache=false"),
    ):
        why = cannot_write(path / ".locks") if on else None
        if why:
            report.problem(
                what,
                ERROR,
                f"the {what} {path} cannot be written ({why}): a build keeps nothing there "
                "and compiles what it cannot read from it.",
                f"make {path} a directory this user can write, name another with "
                f"-C wheel-cache-dir=DIR, or build with -C {off}.",
            )


def diagnose(project: Path = PROJECT) -> DoctorReport:
    """What a build of the project here would use (its flavour, from its pyproject.toml)."""
    report = DoctorReport(project)
    try:
        flavour, settings = _registry.load(None, project_dir=project)
    except FaShimError as exc:
        report.problem("settings", ERROR, exc.cause, exc.fix or "")
        flavour, settings = _registry.of_project(project), _registry.defaults()
        if flavour is None:  # no flavour, no build to diagnose: the error says why
            return report
    _toolchain_sections.python_section(report, flavour)
    report.sections["project"] = {"path": str(project), "distribution": flavour.names.dist}
    report.sections["pins"] = dict(flavour.sdist_contents(settings).pins)  # what picks its sources
    torch = _toolchain_sections.torch_section(report, flavour, settings)
    nvcc = _toolchain_sections.nvcc_section(report, settings, torch)
    _toolchain_sections.compiler_section(report, torch)
    preflight_section(report, torch, nvcc)
    _toolchain_sections.ninja_section(report)
    objects = _objects.root_of(settings)
    report.add(
        "object cache",
        {"on": settings.object_cache, "root": str(objects)},
        _objects.describe(objects) if settings.object_cache else "off (-C object-cache=false)",
    )
    caches_section(report, settings, objects)
    seal = pipeline.network_seal()
    report.add("seal", dataclasses.asdict(seal), seal.describe())
    plan, tools, exc = planned(project)
    gpus = _machine_and_gpus(report, flavour, settings, torch, nvcc, tools, exc)
    _installed_section(report, flavour, torch, gpus)
    requirements_section(report)  # the build's own checks, plan and cache lookup
    build_section(report, project, plan, tools, exc)
    return report
