"""doctor's report, and its toolchain sections: the interpreter, torch, nvcc, the host compiler
and ninja, each found by the build's own code or a real probe of the tool (the host compiler
preprocesses <string>; ninja --version); each problem carries its fix."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..core._errors import FaShimError
from ..resources import PROJECT
from ..toolchain import _compilers, _toolkit, _torch
from ..toolchain._compilers import compiler_abi
from ..verify._report import ERROR, WARNING, Check, Report, plural
from ..wheel import _metadata

if TYPE_CHECKING:
    from ..flavours._interface import Flavour


@dataclasses.dataclass
class DoctorReport(Report):
    """What a build would use (a line and a --json section per topic) and the problems found:
    Checks named after their section, with status ERROR or WARNING."""

    project: Path = PROJECT  # what `pip install --no-build-isolation PROJECT` would build
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
        head = (
            f"fa-shim doctor: what `pip install --no-build-isolation {self.project}` would use here"
        )
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


def python_section(report: DoctorReport, flavour: Flavour) -> None:
    version = ".".join(map(str, sys.version_info[:3]))
    try:
        tag = str(_metadata.wheel_tag(flavour.names))
    except FaShimError as exc:
        tag = "none"
        report.problem("python", ERROR, exc.cause, exc.fix or "")
    report.add(
        "python",
        {"version": version, "executable": sys.executable, "wheel_tag": tag},
        f"Python {version} {sys.executable}; wheel tag {tag}",
    )


def torch_section(report: DoctorReport, flavour: Flavour, settings) -> _torch.TorchInfo | None:
    try:
        # the build's very call: its plan (_doctor.planned) then reuses this answer
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
            f"torch {torch.version} is a CPU-only build: {flavour.names.dist}'s CUDA kernels "
            "cannot be built or run against it.",
            "install a CUDA build of torch (e.g. `pip install torch==2.11.0`, CUDA 13.0), then "
            "run doctor again.",
        )
    lines = flavour.torch_lines(settings, torch) if torch.cuda else {}
    if lines:
        report.add("lines", lines, *(f"{name}: {why}" for name, why in lines.items()))
    return torch


def nvcc_section(report: DoctorReport, settings, torch) -> _compilers.Nvcc | None:
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
    first = found[0] if found else chosen  # an nvcc is chosen only for a CUDA torch
    if (
        chosen is not None
        and first.path != chosen.path
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


def compiler_section(report: DoctorReport, torch) -> None:
    info = _compilers.host_compiler()
    cxx = info["command"]
    abi, error = compiler_abi(cxx)
    data = {**info, "default_cxx11_abi": abi}
    for problem in _compilers.host_compiler_problems():  # the check a build makes first
        report.problem("compiler", ERROR, problem.cause, problem.fix or "")
    if abi is None:
        report.add("compiler", data, f"{cxx}: cannot preprocess <string> ({error})")
        return
    std_note = ""
    if torch is not None and torch.cxx_std and torch.cxx_std.startswith("c++"):
        std_abi, std_error = compiler_abi(cxx, torch.cxx_std)
        data["accepts_std"] = accepts = std_abi is not None
        std_note = f", {'accepts' if accepts else 'REJECTS'} -std={torch.cxx_std}"
        if not accepts:
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


def ninja_section(report: DoctorReport) -> None:
    ninja = shutil.which("ninja")
    problem = _compilers.ninja_problem(os.environ.get("PATH", os.defpath))
    version = None if problem else _compilers.ninja_version(ninja)
    report.add(
        "ninja",
        {"path": ninja, "version": version},
        f"{version} ({ninja})" if version else f"{ninja} does not run" if ninja else "not on PATH",
    )
    if problem:  # the check a build makes first
        report.problem("ninja", ERROR, problem.cause, problem.fix or "")
