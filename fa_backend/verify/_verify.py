"""Does a built flash-attn fit a torch? Answered by reading the ELF files, never by importing them,
for any flash-attn: a wheel (fa-shim's or not), an installed distribution, or a bare module."""

from __future__ import annotations

import dataclasses
import os
import sys
import zipfile
from pathlib import Path

from ..core import _scratch
from ..core._errors import FaShimError
from ..flavours import _registry
from ..toolchain._mangling import is_torch_symbol
from ..toolchain._torch import TorchInfo
from ..wheel import _wheelfile
from . import _stable_abi
from ._checks import (
    Gpu,
    check_archs,
    check_cuda_runtime,
    check_cxx_runtime,
    check_module,
    check_provenance,
    check_symbols,
    check_tags,
)
from ._elf import ElfModule, TorchExports, read_module
from ._report import FAIL, PASS, SKIP, Check, Report
from ._targets import Target, installed_target, module_target, wheel_target

__all__ = ["Gpu", "VerifyReport", "gpus_here", "torch_here", "verify_path", "verify_wheel"]


def check_record(wheel: Path) -> Check:
    """verify's `record` check: a wheel's members against its RECORD (wheel/_wheelfile)."""
    try:
        found = _wheelfile.problems(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        return Check("record", FAIL, f"the wheel does not read as a zip ({exc})")
    if found:
        return Check(
            "record",
            FAIL,
            f"{len(found)} member(s) differ from the wheel's RECORD: it was changed after it "
            "was built (or damaged), so nothing in it can be trusted",
            details=found,
            fix="build the wheel again (a wheel-cache entry is rebuilt by itself).",
        )
    return Check("record", PASS, "every member matches its sha256 and size in RECORD")


@dataclasses.dataclass
class VerifyReport(Report):
    target: str
    kind: str  # "wheel", "installed" or "module"
    torch: TorchInfo
    checks: list[Check]
    modules: list[str] = dataclasses.field(default_factory=list)

    def torch_line(self) -> str:
        return (
            f"torch {self.torch.version} (CUDA {self.torch.cuda or 'none'}, "
            f"_GLIBCXX_USE_CXX11_ABI={self.torch.abi}) at {self.torch.package_dir}"
        )

    def heading(self) -> list[str]:
        return [f"verify {self.kind} {self.target}", f"  against {self.torch_line()}"]

    def body(self) -> list[str]:
        return [
            line
            for c in self.checks
            for line in c.lines(f"  {c.status.upper():4}  {c.name:13} ", " " * 21)
        ]

    def summary(self) -> str:
        failed = self.failures
        if failed:
            return (
                f"FAILED ({len(failed)} of {len(self.checks)} checks: "
                f"{', '.join(c.name for c in failed)})"
            )
        skipped = self.count(SKIP)
        return f"OK ({len(self.checks) - skipped} passed, {skipped} skipped)"

    def as_dict(self) -> dict:
        return {
            "target": self.target,
            "kind": self.kind,
            "ok": self.ok,
            "modules": self.modules,
            "torch": {
                "version": self.torch.version,
                "cuda": self.torch.cuda,
                "cxx11_abi": self.torch.abi,
                "path": self.torch.package_dir,
            },
            "checks": [dataclasses.asdict(c) for c in self.checks],
        }

    def raise_for_failures(self) -> None:
        """One FaShimError naming every failed check and its fix (nothing if all passed)."""
        failed = self.failures
        if not failed:
            return
        names = ", ".join(c.name for c in failed)
        raise FaShimError(
            f"{self.target} does not fit {self.torch_line()} (failed: {names}).",
            details="\n".join(
                line
                for c in failed
                for line in (f"{c.name}: {c.summary}", *(f"  {d}" for d in c.details))
            ),
            fix=" ".join(dict.fromkeys(c.fix for c in failed if c.fix)) or None,
        )


def torch_here() -> TorchInfo:
    """The torch of the running interpreter, imported here (cuda_home, cxx_std left unknown)."""
    try:
        import torch
    except Exception as exc:
        raise FaShimError(
            f"torch is not importable by {sys.executable} ({type(exc).__name__}: {exc}).",
            fix="run verify with the interpreter flash-attn will run under "
            "(`--python /path/to/venv/bin/python`), or install torch there first.",
        ) from None
    return TorchInfo(
        version=torch.__version__,
        cuda=torch.version.cuda,
        abi=int(torch._C._GLIBCXX_USE_CXX11_ABI),
        cuda_home=None,
        package_dir=os.path.dirname(torch.__file__),
        cxx_std="unknown",
        python=sys.executable,
    )


def gpus_here() -> list[Gpu]:
    """The GPUs the running torch sees (empty without one, or with a CPU-only torch)."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [
        Gpu(i, torch.cuda.get_device_name(i), tuple(torch.cuda.get_device_capability(i)))
        for i in range(torch.cuda.device_count())
    ]


def _run(target: Target, torch: TorchInfo, gpus: list[Gpu] | None) -> VerifyReport:
    checks = [check_tags(target), check_module(target)]
    modules = [_read(target, name, path) for name, path in target.modules]
    if modules:
        symbols_abi = _foreign(modules, target.flavour)
        if symbols_abi is None:
            with TorchExports(torch.lib_dir) as exports:
                symbols_abi = check_symbols(target, modules, torch, exports)
        checks += [*symbols_abi, check_cuda_runtime(modules, torch, target.flavour)]
        checks.append(check_cxx_runtime(modules, target.flavour))
    checks.append(check_provenance(target, torch))
    if modules:
        checks.append(check_archs(modules, target, gpus))
    return VerifyReport(
        target.description, target.kind, torch, checks, [n for n, _ in target.modules]
    )


def _foreign(modules: list[ElfModule], flavour) -> tuple[Check, Check] | None:
    """Nothing of torch and no device code: another project's module under this name."""
    if _stable_abi.looks_stable(modules) or any(
        m.cuda is not None or any(map(is_torch_symbol, m.undefined)) for m in modules
    ):
        return None
    inits = sorted({n for m in modules for n in m.init}) or ["none"]
    needs = sorted({n for m in modules for n in m.needed}) or ["nothing"]
    dist = flavour.names.dist
    return Check(
        "symbols",
        FAIL,
        f"the module takes no symbol from torch and embeds no CUDA device code: it is not a "
        f"{dist} extension but another module under its name (its Python init: "
        f"{', '.join(inits)}; it needs {', '.join(needs)}).",
        fix=f"rebuild {dist} against this torch: `{flavour.rebuild_command()}`.",
    ), Check("abi", SKIP, "the module references nothing of torch")


def _read(target: Target, name: str, path: Path) -> ElfModule:
    """A module's ELF facts; a wheel's error names the wheel, not the temporary copy read."""
    try:
        return read_module(path)
    except FaShimError as exc:
        if target.kind == "wheel":
            exc.cause = exc.cause.replace(str(path), f"{name} in {target.description}")
            exc.args = (exc.cause,)
        raise


def _resolve(torch: TorchInfo | None, gpus: list[Gpu] | None) -> tuple[TorchInfo, list | None]:
    if torch is None:
        torch = torch_here()
        if gpus is None:
            gpus = gpus_here()
    return torch, gpus


def verify_wheel(
    wheel: Path, torch: TorchInfo | None = None, gpus: list[Gpu] | None = None
) -> VerifyReport:
    """Verify a wheel against torch (default: the running interpreter's, and its GPUs; with an
    explicit torch, GPUs only if passed)."""
    torch, gpus = _resolve(torch, gpus)
    with _scratch.directory("verify") as scratch:
        report = _run(wheel_target(Path(wheel), scratch), torch, gpus)
    report.checks.insert(1, check_record(Path(wheel)))  # after tags: what follows reads members
    return report


def verify_path(
    spec: str | Path, torch: TorchInfo | None = None, gpus: list[Gpu] | None = None
) -> VerifyReport:
    """A wheel, an installed flash-attn ("flash_attn" or a site-packages dir), or a bare .so."""
    text = str(spec)
    path = Path(text)
    if text.endswith(".whl"):
        if not path.is_file():
            raise FaShimError(f"{path} does not exist.", fix="pass the path of a wheel file.")
        return verify_wheel(path, torch, gpus)
    if text.endswith(".so") and not path.is_dir():
        if not path.is_file():
            raise FaShimError(f"{path} does not exist.", fix="pass the path of the module.")
        torch, gpus = _resolve(torch, gpus)
        return _run(module_target(path), torch, gpus)
    names = {n for f in _registry.every() for n in (f.names.package, f.names.dist)}
    if text not in names and not path.is_dir():
        raise FaShimError(
            f"{text} is neither a wheel, a .so, a directory nor 'flash_attn' / 'flash_attn_3'.",
            fix="pass a .whl, a flash_attn_2_cuda*.so, a site-packages directory, or flash_attn "
            "or flash_attn_3 (the installed distribution).",
        )
    torch, gpus = _resolve(torch, gpus)
    return _run(installed_target(text), torch, gpus)
