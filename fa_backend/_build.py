"""The pipeline behind the hooks: plan (cheap: settings, torch, sdist, names), then build."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from packaging import tags

from . import (
    _archs,
    _compile_commands,
    _kernels,
    _log,
    _metadata,
    _patches,
    _sdist,
    _settings,
    _toolchain,
    _torch,
)
from ._errors import FaShimError
from ._wheelfile import WheelWriter, publish

DRIVER = Path(__file__).with_name("_upstream_driver.py")
PROVENANCE = "fa_shim_provenance.json"
_BLOCKED_EXIT = 86
_SCRUBBED_ENV = ("FLASH_ATTENTION_SKIP_CUDA_BUILD", "FLASH_ATTENTION_FORCE_CXX11_ABI")


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
    torch = _torch.probe()
    sdist = _sdist.locate(settings)
    patches = tuple(_patches.patches_for(sdist.version)) if sdist.pinned else ()
    tailoring = _kernels.tailoring(settings, sdist.version)
    version = _metadata.full_version(sdist.version, torch.label + tailoring.label)
    metadata = _metadata.core_metadata(_metadata.read_pkg_info(sdist.path), version)
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


@dataclasses.dataclass
class Prepared:
    """An extracted, patched source tree whose build.ninja torch has written."""

    source: Path
    nvcc: _toolchain.Nvcc | None
    ninja_file: Path
    commands: list[_compile_commands.Command]
    report: dict
    log: Path


def _needs_cuda(source: Path) -> bool:
    return any(source.glob("csrc/**/*.cu"))


def child_env(plan: Plan, nvcc: _toolchain.Nvcc | None) -> dict[str, str]:
    env = dict(os.environ)
    for name in _SCRUBBED_ENV:
        if env.pop(name, None) is not None:
            _log.warn(f"ignoring {name}: fa-shim always builds the extension with torch's ABI")
    env["FLASH_ATTENTION_FORCE_BUILD"] = "TRUE"  # upstream's switch off its wheel download
    env["BUILD_TARGET"] = "cuda"
    env["PYTHONUNBUFFERED"] = "1"
    if nvcc:
        env["CUDA_HOME"] = str(nvcc.cuda_home)
        env["PATH"] = f"{nvcc.path.parent}{os.pathsep}{env.get('PATH', '')}"
    s = plan.settings
    if s.max_jobs:
        env["MAX_JOBS"] = str(s.max_jobs)
    if s.nvcc_threads:
        env["NVCC_THREADS"] = str(s.nvcc_threads)
    if s.cuda_archs:
        env["FLASH_ATTN_CUDA_ARCHS"] = ";".join(s.cuda_archs)
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(
            f"{a[:-1]}.{a[-1]}" if a.isdigit() else f"{a[:-2]}.{a[-2:]}" for a in s.cuda_archs
        )
    return env


def _first_errors(log: Path, limit: int = 15) -> str:
    pattern = re.compile(r"(error|FAILED:|fatal|Killed|undefined reference)", re.IGNORECASE)
    lines = log.read_text(errors="replace").splitlines()
    hits = [i for i, line in enumerate(lines) if pattern.search(line)]
    if not hits:
        return "\n".join(lines[-limit:])
    return "\n".join(lines[hits[0] : hits[0] + limit])


def _run_driver(plan: Plan, source: Path, dist: Path, mode: str, nvcc, log: Path) -> dict:
    spec_path = source.parent / f"fa-shim-{mode}.json"
    report_path = source.parent / f"fa-shim-{mode}-report.json"
    spec = {
        "setup_dir": str(source),
        "mode": mode,
        "dist_dir": str(dist),
        "report": str(report_path),
        "abi": plan.torch.abi,
        "cxx_std": plan.torch.cxx_std,
        "extra_sys_path": [plan.torch.site_dir],
        "exclude_sources": list(plan.tailoring.exclude_sources),
        "defines": list(plan.tailoring.defines),
    }
    spec_path.write_text(json.dumps(spec))
    _log.info(f"running upstream setup.py ({mode}); full log: {log}")
    with log.open("a") as out:
        proc = subprocess.Popen(
            [sys.executable, str(DRIVER), str(spec_path)],
            cwd=source,
            env=child_env(plan, nvcc),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            if _log.is_verbose():
                sys.stderr.write(line)
        code = proc.wait()
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    if code == _BLOCKED_EXIT:
        raise FaShimError(
            f"upstream's build tried to download something ({report.get('blocked')}); fa-shim "
            "forbids network access during the build so that no prebuilt binary can slip in.",
            fix="report this: this flash-attn version has a download path fa-shim does not "
            f"disable yet. Full log: {log}",
        )
    if code != 0:
        raise FaShimError(
            f"the upstream build failed (exit status {code}).",
            details=_first_errors(log),
            fix=f"read the full log: {log}",
        )
    return report


def prepare(plan: Plan, scratch: Path) -> Prepared:
    """Extract, patch, pick the toolchain and let torch write build.ninja (nothing compiled)."""
    log_dir = plan.settings.resolved_cache_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"flash-attn-{plan.version}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    source = _sdist.extract(plan.sdist, scratch / "src")
    _patches.apply_all(list(plan.patches), source)
    nvcc = None
    if _needs_cuda(source):
        nvcc = _toolchain.choose_nvcc(plan.torch, plan.settings.nvcc)
        _log.info(f"using nvcc {nvcc.describe()}")
    report = _run_driver(plan, source, scratch / "dist", "prepare", nvcc, log)
    if not report.get("ninja_files"):
        raise FaShimError(
            "upstream setup.py declared no compiled extension (a py3-none-any "
            "build would not import).",
            fix=f"read the log: {log}",
        )
    ninja_file = Path(report["ninja_files"][-1])
    commands = _compile_commands.read(ninja_file)
    _compile_commands.verify_abi(commands, plan.torch.abi, ninja_file)
    if nvcc:
        archs = _archs.resolve(plan.settings, plan.torch, nvcc.path, plan.sdist.version, os.environ)
        _archs.check_gencodes(commands, archs.targets)
    _kernels.check_sources(commands, plan.tailoring, plan.sdist.version)
    return Prepared(source, nvcc, ninja_file, commands, report, log)


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
        "nvcc": {"path": str(prep.nvcc.path), "version": str(prep.nvcc.version)}
        if prep.nvcc
        else None,
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
    with scratch_dir(plan.settings) as scratch:
        prep = prepare(plan, scratch)
        dist = scratch / "dist"
        _run_driver(plan, prep.source, dist, "wheel", prep.nvcc, prep.log)
        _compile_commands.verify_abi(
            _compile_commands.read(prep.ninja_file), plan.torch.abi, prep.ninja_file
        )
        built = sorted(dist.glob("*.whl"))
        if len(built) != 1:
            raise FaShimError(
                f"upstream bdist_wheel produced {len(built)} wheels in {dist}.",
                fix=f"read the log: {prep.log}",
            )
        wheel = repack(plan, built[0], scratch / "wheel" / plan.wheel_name, provenance(plan, prep))
        path = publish(wheel, out_dir)  # only a complete wheel ever appears in out_dir
    _log.info(f"built {path}")
    return path.name


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
