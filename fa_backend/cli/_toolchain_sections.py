"""doctor's toolchain sections: the interpreter, torch, nvcc, the host compiler and ninja, each
found by the build's own code or a real probe of the tool (the host compiler preprocesses
<string>; ninja --version); each problem carries its fix."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from ..core._errors import FaShimError
from ..toolchain import _compilers, _toolkit, _torch
from ..verify._report import ERROR, WARNING
from ..wheel import _metadata
from ._doctor_report import DoctorReport

if TYPE_CHECKING:
    from ..flavours._interface import Flavour


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
            f"torch {torch.version} is a CPU-only build: {flavour.names.dist}'s CUDA kernels "
            "cannot be built or run against it.",
            "install a CUDA build of torch (e.g. `pip install torch==2.11.0`, CUDA 13.0), then "
            "run doctor again.",
        )
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


def compiler_section(report: DoctorReport, torch) -> None:
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


def ninja_section(report: DoctorReport) -> None:
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
