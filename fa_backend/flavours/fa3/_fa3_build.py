"""The FlashAttention-3 side of the pipeline: the steps where flash-attn-3 differs from
flash-attn (docs/fa3-design.md). _build runs the shared ones (toolchain, upstream run, repack,
verify, the wheel cache) and asks this module for the rest:

- plan: the two source trees located and pinned, hopper/setup.py's switches and version read
  from the pinned tree, the tailored set, the abi3 tag and the label;
- archs: sm_90a only (upstream hard-codes it; its sm80 path stays off);
- lay_out: the trees laid out as a checkout and patched;
- check: what build.ninja compiles is the tailored set, for sm_90a only.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ...core import _log
from ...core._errors import FaShimError
from ...pipeline import _patches
from ...pipeline._compile_commands import Command
from ...pipeline._plan import Fa3Source, Plan
from ...settings._settings import Settings
from ...toolchain import _archs, _cuda_driver
from ...toolchain._torch import TorchInfo
from ...wheel import _metadata
from .._names import FA3
from . import _fa3_kernels, _fa3_releases, _fa3_sources, _trees

ARCH = "90a"  # hopper/setup.py compiles its *_sm90.cu sources for exactly this
# what hopper/setup.py's ninja rules compile: its *_sm90.cu kernels for sm_90a, the helper units
# (the scheduler, the split combine) for sm_80 too, whatever the SM80 switch says
_GENCODES = {
    "kernel": {"compute_90a:sm_90a"},
    "helper": {"compute_90a:sm_90a", "compute_80:sm_80"},
}
# ninja starts edges in file order: the slowest units (backward, then forward) go first
HEAVY_FIRST = ("flash_bwd_*", "flash_fwd_hdim*", "flash_fwd_*")
_VERSION = re.compile(r"^__version__\s*=\s*(.+)$", re.MULTILINE)
# the runtime guard's way in; the kernel-set label's sources (checked after prepare)
_KERNEL = re.compile(r"flash_(fwd|bwd)_hdim(\d+|all|diff)_(bf16|fp16|e4m3)(\w*)_sm(\d+)\.cu$")


def _read(tree: _trees.Tree, rel: str) -> str:
    for name, blocks in _trees.files(tree.path, tree.kind):
        if name == rel:
            return b"".join(blocks).decode("utf-8")
    raise FaShimError(
        f"the {tree.kind.name} tree {tree.path} has no {rel}.",
        fix="give flash-attention's hopper tree (LICENSE + hopper/).",
    )


def upstream_version(init_py: str) -> str:
    """hopper/__init__.py's `__version__ = "3.0.0.b1"`, as PEP 440 normalises it (3.0.0b1)."""
    match = _VERSION.search(init_py)
    try:
        return str(Version(ast.literal_eval(match.group(1).strip()))) if match else ""
    except (ValueError, SyntaxError, InvalidVersion):
        return ""


def plan(settings: Settings, torch: TorchInfo) -> Plan:
    if not settings.flash_attn_version:
        raise FaShimError(
            "flash-attn-3 needs the flash-attention release whose hopper/ it builds.",
            fix='set flash-attn-version = "2.8.3" in [tool.fa-shim] of '
            "flash-attn-3/pyproject.toml.",
        )
    if torch.cuda is None:
        raise FaShimError(
            f"torch {torch.version} has no CUDA: FlashAttention-3 compiles CUDA kernels against "
            "a CUDA torch.",
            fix="install a CUDA build of torch (e.g. pip install torch, CUDA 12.3 or newer).",
        )
    release = _fa3_releases.release(settings.flash_attn_version)
    sources = _fa3_sources.locate(
        release,
        settings.resolved_cache_dir,
        checkout=settings.fa3_source,
        hopper=settings.fa3_hopper,
        cutlass=settings.fa3_cutlass,
        shared_dir=settings.fa3_source_dir,
        download=not settings.offline,
    )
    tailoring = _fa3_kernels.tailoring(
        settings, _fa3_kernels.switches(_read(sources.hopper, "hopper/setup.py"))
    )
    upstream = upstream_version(_read(sources.hopper, "hopper/__init__.py"))
    if not upstream:
        raise FaShimError(
            f"hopper/__init__.py of {release.tag} has no __version__ fa-shim can read.",
            fix="report this with the flash-attention version.",
        )
    # every 2.8.x tag's hopper/ says 3.0.0b1: the tag goes into the label
    label = f"{release.tag}.{torch.label}{tailoring.label}"
    version = _metadata.full_version(upstream, label)
    metadata = _metadata.core_metadata(
        _metadata.fa3_pkg_info(release.tag), version, _metadata.torch_requirement(torch.version)
    )
    patches = tuple(_patches.read(release.patches))
    return Plan(
        settings,
        torch,
        None,
        patches,
        version,
        _metadata.wheel_tag(FA3),
        metadata,
        fa3=Fa3Source(release, sources, tailoring),
    )


# Peak memory of one FA3 unit, measured on the H100 (docs/benchmarks.md): a forward
# flash_fwd_hdimall_* unit compiles every head dim of the set into one object, about 4.5 GiB
# each (17-22 GiB for all five), a backward unit about 6 GiB
_GIB = 1024**3
_FWD_BYTES_PER_HEAD_DIM = int(4.5 * _GIB)
_MIN_JOB_BYTES = 6 * _GIB


def job_bytes(plan: Plan) -> int:
    return max(_MIN_JOB_BYTES, _FWD_BYTES_PER_HEAD_DIM * len(plan.fa3.tailoring.head_dims))


def jobs(plan: Plan, planned: int, available_bytes: int) -> int:
    """FA2's plan of jobs, cut to what FA3's heavier units fit in memory (a full set on 16
    cores and 128 GiB: 5, not 16; the kernel would kill the rest)."""
    if plan.settings.max_jobs:
        return planned
    fits = max(1, available_bytes // job_bytes(plan))
    if fits < planned:
        _log.info(
            f"{fits} compile job(s), not {planned}: a FlashAttention-3 unit of this set needs "
            f"about {job_bytes(plan) / _GIB:.0f} GiB (set -C max-jobs to choose)"
        )
    return min(planned, fits)


def archs(settings: Settings, nvcc_path: Path) -> _archs.ArchChoice:
    """sm_90a, and nothing else: FA3's kernels are Hopper's (wgmma, TMA)."""
    if settings.cuda_archs:
        wrong = [a for a in settings.cuda_archs if a not in ("90", "90a")]
        if wrong:
            raise FaShimError(
                f"setting cuda-archs asks for {', '.join(wrong)}: FlashAttention-3 is built for "
                "Hopper (sm_90a) only.",
                fix="install flash-attn (FA2, fa-shim's root project) for that GPU, or "
                "-C cuda-archs=90a to build for a Hopper elsewhere.",
            )
        source = "setting cuda-archs"
    else:
        gpus = _cuda_driver.capabilities()
        other = sorted({f"{major}{minor}" for major, minor in gpus} - {"90"})
        if other:
            raise FaShimError(
                f"the visible GPUs include compute capability {', '.join(other)}, and "
                "FlashAttention-3 runs on Hopper (9.0) only.",
                fix="install flash-attn (FA2, fa-shim's root project) for that GPU, or "
                "-C cuda-archs=90a to build for a Hopper elsewhere.",
            )
        source = "the visible GPUs" if gpus else "FlashAttention-3 (Hopper only)"
    if _archs._base(ARCH) not in {_archs._base(a) for a in _archs.nvcc_arch_list(nvcc_path)}:
        raise FaShimError(
            f"{nvcc_path} cannot compile for sm_90a.",
            fix="use CUDA 12.3 or newer (-C nvcc=...).",
        )
    # upstream's sm80 kernels stay out: the sm_90a build is what FA3 is for (design note)
    env = {_fa3_kernels.ENV_PREFIX + "SM80": "TRUE"}
    return _archs.ArchChoice(_archs.Selection((ARCH,), source), (ARCH,), (), env)


def lay_out(plan: Plan, dest: Path) -> Path:
    """The trees as a checkout has them, patched; returns the hopper/ directory to build in."""
    hopper = _trees.lay_out(plan.fa3.sources, dest)
    _patches.apply_all(list(plan.patches), dest)
    return hopper


# FA3's flash_api.cpp includes ATen/cuda/CUDAContext.h, which includes these CUDA library
# headers; a toolkit installed as the compiler alone (NVIDIA's cuda-nvcc package) lacks them
_LIBRARY_HEADERS = ("cusparse.h", "cublas_v2.h", "cublasLt.h", "cusolverDn.h")


def library_includes(torch: TorchInfo, cuda_home: Path) -> list[str]:
    """Where the CUDA library headers the toolkit lacks are: in the nvidia-* wheels torch itself
    runs with (the same CUDA release as its libraries), found next to torch."""
    site = Path(torch.package_dir).parent / "nvidia"
    dirs = []
    for header in _LIBRARY_HEADERS:
        if (cuda_home / "include" / header).is_file():
            continue
        found = sorted(site.glob(f"*/include/{header}")) if site.is_dir() else []
        if found and str(found[0].parent) not in dirs:
            dirs.append(str(found[0].parent))
    return dirs


def environment(plan: Plan, cuda_home: Path) -> dict[str, str]:
    """Every switch said, TRUE or FALSE: a stray variable of the user's cannot change the set;
    and the CUDA library headers the toolkit lacks, from torch's own nvidia wheels."""
    env = dict(plan.fa3.tailoring.env)
    extra = library_includes(plan.torch, cuda_home)
    if extra:
        _log.info(f"CUDA library headers from torch's nvidia wheels: {', '.join(extra)}")
        # after every -I of the build (host compiler only reads it): never shadows the toolkit
        current = os.environ.get("CPLUS_INCLUDE_PATH")
        env["CPLUS_INCLUDE_PATH"] = os.pathsep.join([*([current] if current else []), *extra])
    return env


def check(commands: list[Command], plan: Plan) -> None:
    """build.ninja compiles what the set says: no left-out head dim, dtype or backward kernel,
    and every kernel for sm_90a."""
    t = plan.fa3.tailoring
    wrong = []
    for c in commands:
        if c.kind == "nvcc":
            found = _archs.gencodes(c)
            want = _GENCODES["kernel" if c.file.endswith("_sm90.cu") else "helper"]
            if found != want:
                shown = ", ".join(sorted(found)) or "none"
                wrong.append(f"{os.path.basename(c.file)}: compiles {shown}")
        match = _KERNEL.search(c.file)
        if not match:
            continue
        direction, hdim, dtype, _, sm = match.groups()
        name = os.path.basename(c.file)
        if sm != "90":
            wrong.append(f"{name}: an sm{sm} kernel")
        if direction == "bwd" and not t.backward:
            wrong.append(f"{name}: a backward kernel in a forward-only set")
        if hdim.isdigit() and hdim not in t.head_dims:
            wrong.append(f"{name}: head dim {hdim} is left out")
        if dtype == "fp16" and "fp16" not in t.dtypes:
            wrong.append(f"{name}: fp16 is left out")
        if dtype == "e4m3" and "fp8" in t.disabled:
            wrong.append(f"{name}: fp8 is left out")
    if wrong:
        raise FaShimError(
            f"hopper/setup.py's build.ninja has {len(wrong)} compile commands that do not "
            "match the set (left-out kernels, or other architectures than sm_90a); upstream's "
            "switches did not do what fa-shim expects.",
            details="\n".join(wrong[:20]),
            fix="report this with the log and the flash-attention version.",
        )
    _log.info(
        f"FlashAttention-3 set: {sum(bool(_KERNEL.search(c.file)) for c in commands)} kernel "
        f"sources, {len(commands)} compile commands, sm_90a"
    )
