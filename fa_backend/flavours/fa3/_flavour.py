"""FlashAttention-3 (flash-attn-3) as a flavour: upstream's hopper/ tree and the CUTLASS tree it
pins, both content-pinned (docs/fa3-design.md); the set as upstream's FLASH_ATTENTION_DISABLE_*
switches; sm_90a only (upstream hard-codes it; its sm80 path stays off); cp39-abi3 wheels."""

from __future__ import annotations

import ast
import dataclasses
import os
import re
from collections.abc import Sequence
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ...core import _log
from ...core._errors import FaShimError
from ...sources import _patches
from ...toolchain import _archs, _cuda_driver, _jobs, _space
from ...toolchain._torch import TorchInfo
from ...wheel import _metadata
from ...wheel._names import Names
from .._interface import Flavour, Plan, Sizing, Tools
from . import _kernels, _releases, _sources, _trees, _units

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
# (a head-dim pair, e.g. hdim64_512, is a unit of its own where the aggregates are split: _units)
_KERNEL = re.compile(
    r"flash_(fwd|bwd)_hdim(\d+(?:_\d+)?|all|diff)_(bf16|fp16|e4m3)(\w*)_sm(\d+)\.cu$"
)


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


def pkg_info(tag: str) -> str:
    """FlashAttention-3 has no sdist, so no PKG-INFO: what hopper/setup.py's setup() says of
    itself (name, its install_requires but torch, which core_metadata pins), written here."""
    return (
        "Metadata-Version: 2.1\n"
        "Name: flash-attn-3\n"
        "Version: 0\n"
        f"Summary: FlashAttention-3 (flash-attention {tag} hopper/), built by fa-shim\n"
        "Home-page: https://github.com/Dao-AILab/flash-attention\n"
        "License: BSD-3-Clause\n"
        "Requires-Python: >=3.9\n"
        "Requires-Dist: einops\n"
        "Requires-Dist: packaging\n"
        "Requires-Dist: ninja\n"
    )


@dataclasses.dataclass(frozen=True)
class Fa3Source:
    """What a FlashAttention-3 build compiles: its release, both pinned trees, the set."""

    release: _releases.Fa3Release
    sources: _sources.Sources
    tailoring: _kernels.Fa3Tailoring


_GIB = 1024**3
_FWD_BYTES_PER_HEAD_DIM = int(4.5 * _GIB)
_MIN_JOB_BYTES = 6 * _GIB


_SPLIT_UNIT_BYTES = int(7.5 * _GIB)  # a per-head-dim unit: 5.2-7.04 GiB measured (issue 24)


def job_bytes(tailoring: _kernels.Fa3Tailoring, split: bool = False) -> int:
    if split:  # each forward unit one head dim (or pair): _units
        return _SPLIT_UNIT_BYTES
    return max(_MIN_JOB_BYTES, _FWD_BYTES_PER_HEAD_DIM * len(tailoring.head_dims))


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


class Fa3(Flavour):
    names = Names(
        "fa3", "flash-attn-3", "flash_attn_3", "flash_attn_3._C", abi3=True, project="flash-attn-3"
    )
    own_settings = frozenset({"fa3-source", "fa3-hopper", "fa3-cutlass", "fa3-source-dir"})
    sources_key = "fa3_sources"

    def plan(self, settings, torch) -> Plan:
        if not settings.flash_attn_version:
            raise FaShimError(
                "flash-attn-3 needs the flash-attention release whose hopper/ it builds.",
                fix='set flash-attn-version = "2.8.3" in [tool.fa-shim] of '
                "flash-attn-3/pyproject.toml.",
            )
        if torch.cuda is None:
            raise FaShimError(
                f"torch {torch.version} has no CUDA: FlashAttention-3 compiles CUDA kernels "
                "against a CUDA torch.",
                fix="install a CUDA build of torch (e.g. pip install torch, CUDA 12.3 or newer).",
            )
        release = _releases.release(settings.flash_attn_version)
        sources = _sources.locate(
            release,
            settings.resolved_cache_dir,
            checkout=settings.fa3_source,
            hopper=settings.fa3_hopper,
            cutlass=settings.fa3_cutlass,
            shared_dir=settings.fa3_source_dir,
            download=not settings.offline,
        )
        tailoring = _kernels.tailoring(
            settings, _kernels.switches(_read(sources.hopper, "hopper/setup.py"))
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
            pkg_info(release.tag), version, _metadata.torch_requirement(torch.version)
        )
        patches = tuple(_patches.read(release.patches))
        tag = _metadata.wheel_tag(self.names)
        source = Fa3Source(release, sources, tailoring)
        return Plan(settings, torch, self, source, patches, version, tag, metadata)

    def sources(self, plan: Plan, with_origin: bool) -> dict:
        """Both trees by their content pins and the commits they are from."""
        release, found = plan.source.release, plan.source.sources
        trees = {
            "tag": release.tag,
            "hopper": {"commit": release.commit, "pin": found.hopper.pin},
            "cutlass": {"commit": release.cutlass_commit, "pin": found.cutlass.pin},
        }
        if with_origin:
            trees["hopper"]["origin"] = found.hopper.origin
            trees["cutlass"]["origin"] = found.cutlass.origin
        return trees

    def upstream_version(self, plan: Plan) -> str:
        return plan.source.release.version

    def kernel_set(self, plan: Plan) -> dict:
        t = plan.source.tailoring
        return {"label": t.label.lstrip(".") or "full", "switches": dict(t.env)}

    # ---------------------------------------------------------------------------- toolchain

    def archs(self, settings, torch, nvcc: Path) -> _archs.ArchChoice:
        """sm_90a, and nothing else: FA3's kernels are Hopper's (wgmma, TMA)."""
        if settings.cuda_archs:
            wrong = [a for a in settings.cuda_archs if a not in ("90", "90a")]
            if wrong:
                raise FaShimError(
                    f"setting cuda-archs asks for {', '.join(wrong)}: FlashAttention-3 is built "
                    "for Hopper (sm_90a) only.",
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
        if _archs._base(ARCH) not in {_archs._base(a) for a in _archs.nvcc_arch_list(nvcc)}:
            raise FaShimError(
                f"{nvcc} cannot compile for sm_90a.",
                fix="use CUDA 12.3 or newer (-C nvcc=...).",
            )
        # upstream's sm80 kernels stay out: the sm_90a build is what FA3 is for (design note)
        env = {_kernels.ENV_PREFIX + "SM80": "TRUE"}
        return _archs.ArchChoice(_archs.Selection((ARCH,), source), (ARCH,), (), env)

    def sizing(self, plan: Plan, archs, cores: int, memory: int) -> Sizing:
        """FA2's plan of jobs, cut to what FA3's heavier units fit in memory (a full set on 16
        cores and 128 GiB: 5, not 16; the kernel would kill the rest)."""
        s = plan.settings
        planned, threads = _jobs.plan_jobs(cores, memory, 1, s.max_jobs, s.nvcc_threads)
        need = job_bytes(plan.source.tailoring, plan.source.release.split_aggregates)
        fits = planned if s.max_jobs else max(1, memory // need)
        if fits >= planned:
            return Sizing(planned, threads)
        cut = f"not {planned}: a FlashAttention-3 unit of this set needs {need / _GIB:.0f} GiB"
        return Sizing(fits, threads, cut=cut)

    # ------------------------------------------------------------------------------ prepare

    def lay_out(self, plan: Plan, tools: Tools, dest: Path) -> Path:
        """The trees as a checkout has them, patched; returns the hopper/ directory."""
        hopper = _trees.lay_out(plan.source.sources, dest)
        _patches.apply_all(list(plan.patches), dest)
        return hopper

    def environment(self, plan: Plan, tools: Tools) -> dict[str, str]:
        """Every switch said, TRUE or FALSE: a stray variable of the user's cannot change the set;
        and the CUDA library headers the toolkit lacks, from torch's own nvidia wheels."""
        env = dict(plan.source.tailoring.env)
        extra = library_includes(plan.torch, tools.nvcc.cuda_home)
        if extra:
            _log.info(f"CUDA library headers from torch's nvidia wheels: {', '.join(extra)}")
            # after every -I of the build (host compiler only reads it): never shadows the toolkit
            current = os.environ.get("CPLUS_INCLUDE_PATH")
            env["CPLUS_INCLUDE_PATH"] = os.pathsep.join([*([current] if current else []), *extra])
        return env

    def driver_spec(self, plan: Plan, tools: Tools, source: Path) -> dict:
        spec: dict = {"heavy_sources_first": list(HEAVY_FIRST)}
        if plan.source.release.split_aggregates:  # the per-head-dim files, not the aggregates
            off = _units.switches_on(plan.source.tailoring.env, _kernels.ENV_PREFIX)
            spec["split_sources"] = _units.split_sources(source, off)
        return spec

    def check(self, plan: Plan, tools: Tools, commands: Sequence) -> None:
        """build.ninja compiles what the set says: no left-out head dim, dtype or backward kernel,
        and every kernel for sm_90a."""
        t = plan.source.tailoring
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
            hdim = hdim.split("_")[0]  # a pair's unit compiles with its first head dim's switch
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

    # ------------------------------------------------------------------ estimate and space

    def estimate_note(self, plan: Plan) -> str:
        return (
            "none for FlashAttention-3 (measured: a tailored set about 2.5 min on 16 cores, "
            "the full set hours: docs/benchmarks.md)"
        )

    def disk_needs(self, plan: Plan, tools: Tools) -> tuple[int, int]:
        # sized as FA2's full set: FA3's units are as heavy, and fewer when tailored
        archs = len(tools.archs.targets) if tools.archs else 1
        return _space.compile_needs(_space.FULL_KERNELS, archs, 0)

    # ------------------------------------------------------------------------------ advice

    def unsupported_gpu(self, sm: int) -> tuple[str, str] | None:
        if sm != 90:
            return (
                "FlashAttention-3 runs on Hopper (9.0) only",
                "install flash-attn (FA2, fa-shim's root project) for this GPU.",
            )
        return None

    def arch_advice(self, gpus_sm: Sequence[int]) -> str:
        unsupported = [self.unsupported_gpu(sm) for sm in gpus_sm]
        if any(unsupported):
            why, fix = next(u for u in unsupported if u)
            return f"{why}: {fix}"
        return f"rebuild for Hopper: `{self.rebuild_command()} -C cuda-archs=90a`."


FLAVOUR = Fa3()
