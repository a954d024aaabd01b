"""`python -m fa_backend doctor`: what a build here would use, and what is wrong with it.

Every finding comes from the same code the build runs (settings, torch probe, nvcc choice,
architecture choice, and its toolchain step for the compile jobs) or from a real probe of the
tool (the host compiler preprocesses <string>; ninja --version); each problem carries its fix.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..core import _log
from ..core._errors import FaShimError
from ..flavours import _registry
from ..flavours._interface import Flavour
from ..fleet import _objects
from ..pipeline import _seal
from ..resources import PROJECT
from ..toolchain import _jobs, _preflight
from ..verify import _verify
from ..verify._fatbin import CudaCode
from ..verify._report import ERROR, WARNING
from . import _prediction
from ._doctor_report import DoctorReport
from ._toolchain_sections import (
    compiler_section,
    ninja_section,
    nvcc_section,
    python_section,
    torch_section,
)

GIB = 1024**3


def _machine_and_gpus(
    report: DoctorReport, flavour: Flavour, settings, torch, nvcc
) -> list[_verify.Gpu] | None:
    if nvcc is not None:
        archs, source = _prediction.archs_to_compile(flavour, settings, torch, nvcc)
    else:
        archs = []
        source = "no usable nvcc" if torch is not None and torch.cuda else "no CUDA torch"
    tools, why = _prediction.build_tools(report.project) if nvcc is not None else (None, source)
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
            "available_memory_gib": round(memory / GIB, 1),
            "jobs": jobs,
            "nvcc_threads": threads,
            **shape,
            "sized": sized,
        },
        f"{cores} cores, {memory / GIB:.1f} GiB available -> {jobs} compile job(s) x "
        f"{threads} nvcc thread(s)",
        f"({sized}; override with -C max-jobs=N -C nvcc-threads=N)",
    )
    if memory < _jobs.job_bytes(1):
        report.problem(
            "machine",
            WARNING,
            f"only {memory / GIB:.1f} GiB of memory is available; one nvcc job compiling a "
            f"flash-attn kernel may take {_jobs.job_bytes(1) / GIB:.0f} GiB and the build may "
            "be killed (OOM).",
            "free memory, or build fewer kernels and architectures: -C max-jobs=1 "
            "-C nvcc-threads=1 -C cuda-archs=<your GPU> (and -C head-dims=... for a tailored "
            "build).",
        )

    gpus: list[_verify.Gpu] | None
    try:
        gpus = _verify.gpus_here()
    except Exception as exc:  # torch not importable in this process (e.g. torch-python)
        gpus = None
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
    if torch is None:
        report.add(
            "flash_attn",
            {"installed": True, "version": dist.version, "location": where, "verified": None},
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
        {
            "installed": True,
            "version": dist.version,
            "location": where,
            "verified": result.ok,
            "failed_checks": failed,
        },
        f"{dist.version} at {where}: "
        + ("verifies against this torch" if result.ok else f"FAILS verify ({', '.join(failed)})"),
    )
    if failed:
        first = result.failures[0]
        report.problem(
            "flash_attn",
            ERROR,
            f"the installed {names.dist} {dist.version} does not fit torch {torch.version}: "
            + "; ".join(f"{c.name}: {c.summary}" for c in result.failures),
            (first.fix or flavour.rebuild_command())
            + f" (details: `python -m fa_backend verify {names.package}`)",
        )


def diagnose(project: Path = PROJECT) -> DoctorReport:
    """What a build of the project here would use (its flavour, from its pyproject.toml)."""
    report = DoctorReport(project)
    try:
        flavour, settings = _registry.load(None, project_dir=project)
    except FaShimError as exc:
        report.problem("settings", ERROR, exc.cause, exc.fix or "")
        found, settings = _registry.of_project(project), _registry.defaults()
        if found is None:  # no flavour, no build to diagnose: the error says why
            return report
        flavour = found
    python_section(report, flavour)
    report.sections["project"] = {"path": str(project), "distribution": flavour.names.dist}
    report.sections["pins"] = dict(flavour.sdist_contents(settings).pins)  # what picks its sources
    torch = torch_section(report, flavour, settings)
    nvcc = nvcc_section(report, settings, torch)
    compiler_section(report, torch)
    _preflight.doctor(report, torch, nvcc)
    ninja_section(report)
    objects = _objects.root_of(settings)
    report.add(
        "object cache",
        {"on": settings.object_cache, "root": str(objects)},
        _objects.describe(objects) if settings.object_cache else "off (-C object-cache=false)",
    )
    report.add("seal", dataclasses.asdict(_seal.choose()), _seal.choose().describe())
    gpus = _machine_and_gpus(report, flavour, settings, torch, nvcc)
    _installed_section(report, flavour, torch, gpus)
    _prediction.requirements_section(report)  # the build's own checks, plan and cache lookup
    _prediction.build_section(report, project)
    return report
