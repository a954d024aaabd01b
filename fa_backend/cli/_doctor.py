"""`python -m fa_backend doctor`: what a build here would use, and what is wrong with it.

Every finding comes from the same code the build runs (settings, torch probe, nvcc choice,
architecture choice, and its toolchain step for the compile jobs) or from a real probe of the
tool (the host compiler preprocesses <string>; ninja --version); each problem carries its fix.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from ..core import _log
from ..core._errors import FaShimError
from ..pipeline import _seal
from ..resources import CHECKOUT
from ..settings import _settings
from ..toolchain import _archs, _compilers, _jobs, _preflight, _toolkit, _torch
from ..verify import _verify
from ..verify._checks import REBUILD
from ..verify._fatbin import CudaCode
from ..verify._report import ERROR, WARNING, Check, Report, plural
from ..wheel import _metadata
from . import _prediction

GIB = 1024**3
ROOT = CHECKOUT


@dataclasses.dataclass
class DoctorReport(Report):
    """What a build would use (a line and a --json section per topic) and the problems found:
    Checks named after their section, with status ERROR or WARNING."""

    sections: dict[str, dict] = dataclasses.field(default_factory=dict)
    lines: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    checks: list[Check] = dataclasses.field(default_factory=list)

    def add(self, section: str, data: dict, *lines: str) -> None:
        self.sections[section] = data
        for i, line in enumerate(lines):
            self.lines.append((section if i == 0 else "", line))

    def problem(self, section: str, severity: str, cause: str, fix: str) -> None:
        self.checks.append(Check(section, severity, cause, fix=fix))

    def heading(self) -> list[str]:
        head = f"fa-shim doctor: what `pip install --no-build-isolation {ROOT}` would use here"
        return [head, *(f"  {label:11} {text}" for label, text in self.lines)]

    def body(self) -> list[str]:
        if not self.checks:
            return []
        ordered = sorted(self.checks, key=lambda p: p.status != ERROR)  # errors first
        return ["problems:", *(x for p in ordered for x in p.lines("  ", "    ", f"{p.status}: "))]

    def summary(self) -> str:
        errors, warnings = self.count(ERROR), self.count(WARNING)
        counts = f"{plural(errors, 'error')}, {plural(warnings, 'warning')}"
        return f"{'PROBLEMS' if errors else 'OK'} ({counts})"

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            **self.sections,
            "problems": [
                {"severity": p.status, "cause": p.summary, "fix": p.fix} for p in self.checks
            ],
        }


# --------------------------------------------------------------------------------- probes


def compiler_abi(cxx: str, std: str | None = None) -> tuple[int | None, str]:
    """(default _GLIBCXX_USE_CXX11_ABI, error) of a C++ compiler: preprocess <string>, read the
    macro libstdc++ defines. std, if given, is passed as -std=... to see that it is accepted."""
    argv = [*shlex.split(cxx), *([f"-std={std}"] if std else []), "-x", "c++", "-dM", "-E", "-"]
    try:
        proc = subprocess.run(
            argv, input="#include <string>\n", capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if proc.returncode != 0:
        err = proc.stderr.strip().splitlines()
        return None, err[0] if err else f"exit status {proc.returncode}"
    match = re.search(r"^#define _GLIBCXX_USE_CXX11_ABI (\d)", proc.stdout, re.MULTILINE)
    if not match:
        return None, "not libstdc++ (no _GLIBCXX_USE_CXX11_ABI defined)"
    return int(match.group(1)), ""


# --------------------------------------------------------------------------------- sections


def _python(report: DoctorReport) -> None:
    version = ".".join(map(str, sys.version_info[:3]))
    try:
        tag = str(_metadata.wheel_tag())
    except FaShimError as exc:
        tag = "none"
        report.problem("python", ERROR, exc.cause, exc.fix or "")
    report.add(
        "python",
        {"version": version, "executable": sys.executable, "wheel_tag": tag},
        f"Python {version} {sys.executable}; wheel tag {tag}",
    )


def _torch_section(report: DoctorReport, settings) -> _torch.TorchInfo | None:
    try:
        # the build's very call: its plan (_prediction.build_tools) then reuses this answer
        torch = _torch.probe(settings.torch_python, settings.resolved_cache_dir / "torch-probes")
    except FaShimError as exc:
        report.add("torch", {"error": exc.cause}, "not found")
        report.problem("torch", ERROR, exc.cause, exc.fix or "")
        return None
    report.add(
        "torch",
        {
            "version": torch.version,
            "cuda": torch.cuda,
            "cxx11_abi": torch.abi,
            "cxx_std": torch.cxx_std,
            "path": torch.package_dir,
        },
        f"{torch.version}  CUDA {torch.cuda or 'none (CPU-only build)'}  "
        f"_GLIBCXX_USE_CXX11_ABI={torch.abi}  -std={torch.cxx_std}",
        f"at {torch.package_dir}",
    )
    if not torch.cuda:
        report.problem(
            "torch",
            ERROR,
            f"torch {torch.version} is a CPU-only build: flash-attn's CUDA kernels cannot be "
            "built or run against it.",
            "install a CUDA build of torch (e.g. `pip install torch==2.11.0`, CUDA 13.0), then "
            "run doctor again.",
        )
    return torch


def _nvcc_section(report: DoctorReport, settings, torch) -> _compilers.Nvcc | None:
    found = _compilers.find_nvccs(settings.nvcc)
    chosen, error, provision = None, None, None
    if torch is not None and torch.cuda:
        try:
            decision = _toolkit.decide(torch, settings)  # the build's choice, nothing downloaded
        except FaShimError as exc:  # a bad cuda-toolkit setting
            decision = _toolkit.Decision(error=exc)
        chosen, error, provision = decision.nvcc, decision.error, decision.provision
    if provision and _toolkit.installed(settings.resolved_cache_dir, provision):
        chosen = _toolkit.nvcc_of(settings.resolved_cache_dir, provision)
        found = [*found, chosen]
    lines = [
        f"{'*' if chosen and n.path == chosen.path else ' '} {n.path}  CUDA "
        f"{n.version or 'unknown'}  (from {n.origin})"
        + ("  <- a build would use this" if chosen and n.path == chosen.path else "")
        for n in found
    ] or ["none found (looked at CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda*)"]
    if provision and chosen is None:
        home = _toolkit.home(settings.resolved_cache_dir, provision)
        lines.append(
            f"* a build would provision CUDA {provision} from the package index into {home} "
            "(setting cuda-toolkit)"
        )
    report.add(
        "nvcc",
        {
            "found": [
                {"path": str(n.path), "version": str(n.version), "origin": n.origin} for n in found
            ],
            "chosen": str(chosen.path) if chosen else None,
            "provision": provision,
        },
        *lines,
    )
    if error is not None:
        report.problem("nvcc", ERROR, error.cause, error.fix or "")
    first = found[0] if found else None
    if (
        chosen is not None
        and first is not None
        and first.path != chosen.path
        and torch is not None
        and first.version is not None
        and first.version.major != torch.cuda_major
    ):
        report.problem(
            "nvcc",
            WARNING,
            f"the first nvcc ({first.path}, from {first.origin}) is CUDA {first.version}, torch "
            f"{torch.version} is built with CUDA {torch.cuda}: fa-shim skips it and uses "
            f"{chosen.path} (CUDA {chosen.version}), but anything else that compiles against "
            "torch (torch.utils.cpp_extension, a plain `pip install flash-attn`) takes the first "
            "one and fails with a CUDA version mismatch.",
            f"put the matching toolkit first: `export CUDA_HOME={chosen.cuda_home} "
            f"PATH={chosen.cuda_home}/bin:$PATH` (or remove the CUDA {first.version} toolkit).",
        )
    return chosen


def _compiler_section(report: DoctorReport, torch) -> None:
    info = _compilers.host_compiler()
    cxx = info["command"]
    abi, error = compiler_abi(cxx)
    data = {**info, "default_cxx11_abi": abi}
    if abi is None:
        report.add("compiler", data, f"{cxx}: cannot preprocess <string> ({error})")
        report.problem(
            "compiler",
            ERROR,
            f"the host C++ compiler `{cxx}` (from {'CXX' if os.environ.get('CXX') else 'c++'}) "
            f"does not work: {error}.",
            "install g++ (apt-get install g++ / dnf install gcc-c++) or point CXX at a working "
            "one.",
        )
        return
    std_note = ""
    if torch is not None and torch.cxx_std and torch.cxx_std.startswith("c++"):
        std_abi, std_error = compiler_abi(cxx, torch.cxx_std)
        data["accepts_std"] = std_abi is not None
        std_note = f", accepts -std={torch.cxx_std}" if std_abi is not None else ""
        if std_abi is None:
            std_note = f", REJECTS -std={torch.cxx_std}"
            report.problem(
                "compiler",
                ERROR,
                f"`{cxx}` rejects -std={torch.cxx_std}, which torch {torch.version}'s headers "
                f"need ({std_error}).",
                "install a newer g++ (GCC 11+ for C++20) and point CXX at it.",
            )
    report.add(
        "compiler",
        data,
        f"{cxx} ({info['path']}): {info['version']}",
        f"default _GLIBCXX_USE_CXX11_ABI={abi}{std_note}",
    )
    if torch is not None and abi != torch.abi:
        report.problem(
            "compiler",
            WARNING,
            f"`{cxx}` defaults to _GLIBCXX_USE_CXX11_ABI={abi}, torch {torch.version} uses "
            f"{torch.abi}. fa-shim passes -D_GLIBCXX_USE_CXX11_ABI={torch.abi} to every compile "
            "and checks it, so its builds are right; a build outside fa-shim (a plain "
            "`pip install flash-attn`, torch.utils.cpp_extension.load) produces a module that "
            "fails with 'undefined symbol'.",
            f"build flash-attn with fa-shim; elsewhere add -D_GLIBCXX_USE_CXX11_ABI={torch.abi} "
            "to the compile flags.",
        )


def _ninja_section(report: DoctorReport) -> None:
    ninja = shutil.which("ninja")
    version = None
    if ninja:
        try:
            version = subprocess.run(
                [ninja, "--version"], capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            version = None
    report.add(
        "ninja",
        {"path": ninja, "version": version},
        f"{version} ({ninja})" if ninja and version else "not found",
    )
    if not (ninja and version):
        report.problem(
            "ninja",
            ERROR,
            "ninja is not installed or does not run: torch's extension build needs it, and "
            "without it compiles run one at a time.",
            "pip install ninja",
        )


def _machine_and_gpus(report: DoctorReport, settings, torch, nvcc) -> list[_verify.Gpu] | None:
    if nvcc is not None:
        archs, source = _prediction.archs_to_compile(settings, torch, nvcc)
    else:
        archs = []
        source = "no usable nvcc" if torch is not None and torch.cuda else "no CUDA torch"
    tools, why = _prediction.build_tools(ROOT) if nvcc is not None else (None, source)
    cores, memory = _jobs.available_cores(), _jobs.available_memory()
    if tools is not None:  # the build's own decision for this configuration
        jobs, threads, parts = tools.jobs, tools.nvcc_threads, tools.tu_parts
        sized = "the build's own sizing for this configuration" + (
            f", each forward kernel source in {parts} parts" if parts > 1 else ""
        )
    else:  # no build could start here: what a full build would get
        jobs, threads = _jobs.plan_jobs(
            cores, memory, len(archs) or 1, settings.max_jobs, settings.nvcc_threads
        )
        parts, sized = None, f"sized for a full build: {why}"
    report.add(
        "machine",
        {
            "cores": cores,
            "available_memory_gib": round(memory / GIB, 1),
            "jobs": jobs,
            "nvcc_threads": threads,
            "tu_parts": parts,
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
        if gpu.sm < _archs.MIN_ARCH:
            report.problem(
                "gpus",
                ERROR,
                f"GPU {gpu.index} ({gpu.name}) has compute capability {gpu.capability[0]}."
                f"{gpu.capability[1]}; flash-attn 2 needs 8.0 (Ampere) or newer.",
                "run on an Ampere, Ada, Hopper or Blackwell GPU.",
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


def _installed_section(report: DoctorReport, torch, gpus) -> None:
    from importlib import metadata

    try:
        dist = metadata.distribution("flash-attn")
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
        result = _verify.verify_path("flash_attn", torch, gpus)
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
            f"the installed flash-attn {dist.version} does not fit torch {torch.version}: "
            + "; ".join(f"{c.name}: {c.summary}" for c in result.failures),
            (first.fix or REBUILD) + " (details: `python -m fa_backend verify flash_attn`)",
        )


def diagnose() -> DoctorReport:
    report = DoctorReport()
    _python(report)
    try:
        settings = _settings.load(None, project_dir=ROOT)
    except FaShimError as exc:
        report.problem("settings", ERROR, exc.cause, exc.fix or "")
        settings = _settings.Settings()
    report.sections["flash_attn_version"] = settings.flash_attn_version
    torch = _torch_section(report, settings)
    nvcc = _nvcc_section(report, settings, torch)
    _compiler_section(report, torch)
    _preflight.doctor(report, torch, nvcc)
    _ninja_section(report)
    report.add("seal", dataclasses.asdict(_seal.choose()), _seal.choose().describe())
    gpus = _machine_and_gpus(report, settings, torch, nvcc)
    _installed_section(report, torch, gpus)
    _prediction.requirements_section(report)  # the build's own checks, plan and cache lookup
    _prediction.build_section(report, ROOT)
    return report
