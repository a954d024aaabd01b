"""FlashAttention-3 (flash-attn-3) as a flavour: upstream's hopper/ and CUTLASS trees of the line
fa3-release picks, content-pinned (docs/fa3-design.md); sm_90a only; abi3 wheels, one per torch
release or, for a stable-ABI line, one for every torch from its floor on (Plan.stable_abi)."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from pathlib import Path

from .. import api
from ..api import (
    CHECKOUT,
    FA_SHIM_VERSION,
    Costs,
    FaShimError,
    Flavour,
    Names,
    Plan,
    SdistSpec,
    Sizing,
    Tools,
    TorchInfo,
)
from . import _costs, _groups, _releases, _settings, _sources, _trees, _units

ARCH = "90a"  # hopper/setup.py compiles its *_sm90.cu sources for exactly this
# what hopper/setup.py's ninja rules compile: its *_sm90.cu kernels for sm_90a, the helper units
# (the scheduler, the split combine) for sm_80 too, whatever the SM80 switch says
_GENCODES = {"kernel": {"compute_90a:sm_90a"}, "helper": {"compute_90a:sm_90a", "compute_80:sm_80"}}
# ninja starts edges in file order: the slowest units (backward, then forward) go first
HEAVY_FIRST = ("flash_bwd_*", "flash_fwd_hdim*", "flash_fwd_*")
# the runtime guard's way in; the kernel-set label's sources (checked after prepare)
_KERNEL = re.compile(
    r"flash_(fwd|bwd)_hdim(\d+(?:_\d+)?|all|diff)_(bf16|fp16|e4m3)(\w*)_sm(\d+)\.cu$"
)


@dataclasses.dataclass(frozen=True)
class Fa3Source:
    """What a FlashAttention-3 build compiles: its release, both pinned trees, the set."""

    release: _releases.Fa3Release
    sources: _sources.Sources
    tailoring: _units.Fa3Tailoring


# FA3's flash_api.cpp includes ATen/cuda/CUDAContext.h, which includes these CUDA library
# headers; a toolkit installed as the compiler alone (NVIDIA's cuda-nvcc package) lacks them
_LIBRARY_HEADERS = ("cusparse.h", "cublas_v2.h", "cublasLt.h", "cusolverDn.h")


def library_includes(torch: TorchInfo, cuda_home: Path) -> list[str]:
    """Where the CUDA library headers the toolkit lacks are: in the nvidia-* wheels beside torch."""
    site = Path(torch.package_dir).parent / "nvidia"
    dirs = []
    for header in _LIBRARY_HEADERS:
        if (cuda_home / "include" / header).is_file():
            continue
        found = sorted(site.glob(f"*/include/{header}")) if site.is_dir() else []
        if found and str(found[0].parent) not in dirs:
            dirs.append(str(found[0].parent))
    return dirs


# upstream's own variables that change what setup.py builds, said as their defaults: ROCm's
# Triton path skips the CUDA build (a wheel without _C), a local version renames the wheel
_NEUTRAL_ENV = {"FLASH_ATTENTION_TRITON_AMD_ENABLE": "FALSE", "FLASH_ATTN_LOCAL_VERSION": ""}
_GIB = 1024**3
GROUP = "group"  # Sizing.shape: forward files compiled together, up to this many a unit (_groups)


class Fa3(Flavour):
    names = Names(
        "fa3", "flash-attn-3", "flash_attn_3", "flash_attn_3._C", abi3=True, project="flash-attn-3"
    )
    own_settings = _settings.OWN
    sources_key = "fa3_sources"

    def torch_lines(self, settings, torch) -> dict[str, str]:
        lines = {}
        for line in map(_releases.release, _releases.known()):
            if not line.stable:
                lines[f"{line.version} (per-torch)"] = (
                    f"yes, a wheel for torch {torch.version} alone"
                )
            elif line.serves(torch.version):
                lines[f"{line.version} (stable ABI)"] = f"yes, every torch >= {line.torch_target}"
            else:
                lines[f"{line.version} (stable ABI)"] = (
                    f"no: its floor is torch {line.torch_target}; this torch is {torch.version}"
                )
        return lines

    def plan(self, settings, torch) -> Plan:
        if torch.cuda is None:
            raise FaShimError(
                f"torch {torch.version} has no CUDA: FlashAttention-3 compiles CUDA kernels "
                "against a CUDA torch.",
                fix="install a CUDA build of torch (e.g. pip install torch, CUDA 12.3 or newer).",
            )
        release = _releases.choose(settings.fa3_release, torch.version)
        if not release.serves(torch.version):
            raise FaShimError(
                f"fa3-release {release.version} builds FlashAttention-3 against torch's stable "
                f"ABI, for torch >= {release.torch_target}; this torch is {torch.version}.",
                fix="install torch >= "
                f"{release.torch_target}, or build the torch-bound line for this torch: "
                "-C fa3-release=auto (docs/guides/flash-attn-3.md#which-line).",
            )
        api.info(
            f"FlashAttention-3 line {release.version} (flash-attention {release.ref}"
            + (f"; torch's stable ABI, torch >= {release.torch_target}" if release.stable else "")
            + f"), from fa3-release={settings.fa3_release}"
        )
        sources = _sources.locate(
            release,
            settings.resolved_cache_dir,
            checkout=settings.fa3_source,
            hopper=settings.fa3_hopper,
            cutlass=settings.fa3_cutlass,
            shared_dir=settings.fa3_source_dir,
            download=not settings.offline,
        )
        setup_py = _trees.read(sources.hopper, "hopper/setup.py")
        if release.stable:
            _trees.check_stable_claim(release, setup_py)
        tailoring = _units.tailoring(settings, _units.switches(setup_py))
        upstream = _trees.upstream_version(_trees.read(sources.hopper, "hopper/__init__.py"))
        if not upstream:
            raise FaShimError(
                f"hopper/__init__.py of {release.ref} has no FA_SHIM_VERSION fa-shim can read.",
                fix="report this with the flash-attention version.",
            )
        stable = release.torch_target if release.stable else None
        # the source (every 2.8.x tag's hopper/ says 3.0.0b1), then torch: its CUDA major and
        # floor for a stable-ABI module, which claims no one torch release
        bound = api.stable_abi_label(torch.cuda, stable) if stable else torch.label
        version = api.full_version(upstream, f"{release.source_label}.{bound}{tailoring.label}")
        interpreter = api.limited_api_tag(torch.limited_api)
        python = f"{interpreter[2]}.{interpreter[3:]}"
        metadata = api.core_metadata(
            _trees.pkg_info(release, python),
            version,
            api.torch_requirement(torch.version, stable),
        )
        patches = tuple(api.read_patches(release.patches))
        tag = api.wheel_tag(self.names, torch.limited_api)
        source = Fa3Source(release, sources, tailoring)
        return Plan(settings, torch, self, source, patches, version, tag, metadata, stable)

    def sources(self, plan: Plan, with_origin: bool) -> dict:
        """Both trees by their content pins and the commits they are from."""
        release, found = plan.source.release, plan.source.sources
        trees = {"line": release.version, "tag": release.tag}
        for tree in found.trees:
            trees[tree.kind.name] = {"commit": _sources.commit(release, tree.kind), "pin": tree.pin}
            if with_origin:
                trees[tree.kind.name]["origin"] = tree.origin
        return trees

    def upstream_version(self, plan: Plan) -> str:
        return plan.source.release.version

    def kernel_set(self, plan: Plan) -> dict:
        t = plan.source.tailoring
        return {"label": t.label.lstrip(".") or "full", "switches": dict(t.env)}

    def archs(self, settings, torch, nvcc: Path) -> api.ArchChoice:
        """sm_90a, and nothing else: FA3's kernels are Hopper's (wgmma, TMA)."""
        if settings.cuda_archs:
            wrong = [a for a in settings.cuda_archs if a not in ("90", "90a")]
            why = (
                f"setting cuda-archs asks for {', '.join(wrong)}: FlashAttention-3 is built "
                "for Hopper (sm_90a) only."
            )
            source = "setting cuda-archs"
        else:
            gpus = api.capabilities()
            wrong = sorted({f"{major}{minor}" for major, minor in gpus} - {"90"})
            why = (
                f"the visible GPUs include compute capability {', '.join(wrong)}, and "
                "FlashAttention-3 runs on Hopper (9.0) only."
            )
            source = "the visible GPUs" if gpus else "FlashAttention-3 (Hopper only)"
        if wrong:
            raise FaShimError(
                why,
                fix="install flash-attn (FA2, fa-shim's root project) for that GPU, or "
                "-C cuda-archs=90a to build for a Hopper elsewhere.",
            )
        if api.base_arch(ARCH) not in {api.base_arch(a) for a in api.nvcc_arch_list(nvcc)}:
            raise FaShimError(
                f"{nvcc} cannot compile for sm_90a.",
                fix="use CUDA 12.3 or newer (-C nvcc=...).",
            )
        # upstream's sm80 kernels stay out: the sm_90a build is what FA3 is for (design note)
        env = {_units.ENV_PREFIX + "SM80": "TRUE"}
        return api.ArchChoice(api.Selection((ARCH,), source), (ARCH,), (), env)

    def sizing(self, plan: Plan, archs, cores: int, memory: int) -> Sizing:
        """FA2's plan of jobs, cut to what the set's heaviest unit fits in memory (v2.8.3's full
        set on 128 GiB: 5 hdimall units of 22 GiB), over the forward variants grouped as the
        model finds fastest (_groups)."""
        s = plan.settings
        planned, threads = api.plan_jobs(cores, memory, 1, s.max_jobs, s.nvcc_threads)
        units = self._setup_units(plan)
        costs = self.costs(plan)
        peak = costs.peak_bytes
        group = s.fa3_group or _groups.best_size(units, costs.seconds, peak, planned, memory)
        layout = _groups.layout(units, group)
        if len(layout) < len(units):
            api.info(
                f"compiling up to {group} forward variants of a head dim in one unit, "
                f"{len(layout)} units for setup.py's {len(units)} (-C fa3-group)"
            )
        need = max(map(peak, layout))
        fits = planned if s.max_jobs else max(1, memory // need)
        if fits >= planned:
            return Sizing(planned, threads, {GROUP: group})
        cut = f"not {planned}: a FlashAttention-3 unit of this set needs {need / _GIB:.0f} GiB"
        return Sizing(fits, threads, {GROUP: group}, cut)

    def _layout(self, plan: Plan, tools: Tools) -> dict[str, list[str]]:
        return _groups.layout(self._setup_units(plan), tools.shape.get(GROUP, 1))

    def _setup_units(self, plan: Plan) -> list[str]:
        """The units setup.py lists for the set, one per file (before any group)."""
        return _units.planned(plan.source.release, plan.source.tailoring)

    def lay_out(self, plan: Plan, tools: Tools, dest: Path) -> Path:
        """The trees as a checkout has them, patched; returns the hopper/ directory."""
        hopper = _trees.lay_out(plan.source.sources.trees, dest)
        api.apply_patches(list(plan.patches), dest)
        _groups.write(hopper / _units.INSTANTIATIONS, self._layout(plan, tools))
        return hopper

    def environment(self, plan: Plan, tools: Tools) -> dict[str, str]:
        """Every switch said, TRUE or FALSE; upstream's other variables at their defaults; the
        CUDA library headers the toolkit lacks."""
        env = dict(plan.source.tailoring.env)
        for name, value in _NEUTRAL_ENV.items():
            if os.environ.get(name, value) != value:
                api.warn(f"ignoring {name}: fa-shim decides how the extension is built")
            env[name] = value
        extra = library_includes(plan.torch, tools.nvcc.cuda_home)
        if extra:
            api.info(f"CUDA library headers from torch's nvidia wheels: {', '.join(extra)}")
            # after every -I of the build (host compiler only reads it): never shadows the toolkit
            current = os.environ.get("CPLUS_INCLUDE_PATH")
            env["CPLUS_INCLUDE_PATH"] = os.pathsep.join(filter(None, [current, *extra]))
        return env

    def driver_spec(self, plan: Plan, tools: Tools, source: Path) -> dict:
        spec: dict = {"heavy_sources_first": list(HEAVY_FIRST)}
        grouped = _groups.replacing(self._layout(plan, tools))
        if plan.source.release.split_aggregates:  # the per-head-dim files, not the aggregates
            off = _units.switches_on(plan.source.tailoring.env)
            split = _units.split_sources(source, off)
            grouped = {
                aggregate: [unit for f in files for unit in grouped.get(f, [f])]
                for aggregate, files in split.items()
            }
        if grouped:
            spec["split_sources"] = grouped
        return spec

    def check(self, plan: Plan, tools: Tools, commands: Sequence) -> None:
        """build.ninja compiles exactly the planned units, nothing left out, for sm_90a."""
        t = plan.source.tailoring
        wrong = []
        for c in commands:
            name = os.path.basename(c.file)
            if c.kind == "nvcc":
                found = api.gencodes(c)
                if found != _GENCODES["kernel" if c.file.endswith("_sm90.cu") else "helper"]:
                    wrong.append(f"{name}: compiles {', '.join(sorted(found)) or 'none'}")
            match = _KERNEL.search(c.file)
            if not match:
                continue
            direction, hdim, dtype, _, sm = match.groups()
            if sm != "90":
                wrong.append(f"{name}: an sm{sm} kernel")
            if direction == "bwd" and not t.backward:
                wrong.append(f"{name}: a backward kernel in a forward-only set")
            qk = hdim.split("_")[0]  # hdim64_256: Q/K head dim 64, V 256
            if qk.isdigit() and qk not in t.head_dims:
                wrong.append(f"{name}: head dim {qk} is left out")
            if dtype == "fp16" and "fp16" not in t.dtypes:
                wrong.append(f"{name}: fp16 is left out")
            if dtype == "e4m3" and "fp8" in t.disabled:
                wrong.append(f"{name}: fp8 is left out")
        compiled = {os.path.basename(c.file) for c in commands}
        planned = set(self.planned_sources(plan, tools))
        wrong += [f"{name}: compiled, not planned" for name in sorted(compiled - planned)]
        wrong += [f"{name}: planned, not compiled" for name in sorted(planned - compiled)]
        if wrong:
            raise FaShimError(
                f"hopper/setup.py's build.ninja differs from the set in {len(wrong)} places "
                "(left-out kernels, units fa-shim did not plan or planned and does not find, or "
                "other architectures than sm_90a); upstream's switches did not do what fa-shim "
                "expects.",
                details="\n".join(wrong[:20]),
                fix="report this with the log and the FlashAttention-3 line (fa3-release).",
            )
        api.info(
            f"FlashAttention-3 set: {sum(bool(_KERNEL.search(c.file)) for c in commands)} kernel "
            f"units, {len(commands)} compile commands, sm_90a"
        )

    def planned_sources(self, plan: Plan, tools: Tools) -> list[str]:
        """The units build.ninja compiles: setup.py's, forward variants grouped as tools say."""
        return list(self._layout(plan, tools))

    def costs(self, plan: Plan) -> Costs:
        directory = plan.source.release.directory
        table = api.load_units(directory) if directory else None
        return Costs(
            _costs.cost_model(plan.source.tailoring),
            _costs.memory_model(plan.source.tailoring, table, self._setup_units(plan)),
            lambda tools, sources, machine: _costs.faster_options(plan, sources, machine),
        )

    def disk_needs(self, plan: Plan, tools: Tools) -> tuple[int, int]:
        # objects sized as FA2's kernel units: FA3's are as heavy
        archs = len(tools.archs.targets) if tools.archs else 1
        return api.compile_needs(len(self.planned_sources(plan, tools)), archs, 0)

    def shape_note(self, shape) -> str | None:
        group = shape.get(GROUP, 1)
        return f"up to {group} forward variants of a head dim in one unit" if group > 1 else None

    def sdist_contents(self, settings) -> SdistSpec:
        # fa-shim's version: the line `auto` builds depends on the torch
        pins = {"fa3-release": settings.fa3_release}
        return SdistSpec(
            FA_SHIM_VERSION, pins, ("LICENSE", _releases.FA3_DIR.relative_to(CHECKOUT))
        )

    def unsupported_gpu(self, sm: int) -> tuple[str, str] | None:
        if sm != 90:
            return (
                "FlashAttention-3 runs on Hopper (9.0) only",
                "install flash-attn (FA2, fa-shim's root project) for this GPU.",
            )
        return None

    def arch_advice(self, gpus_sm: Sequence[int]) -> str:
        unsupported = next(filter(None, map(self.unsupported_gpu, gpus_sm)), None)
        if unsupported:
            return ": ".join(unsupported)
        return f"rebuild for Hopper: `{self.rebuild_command()} -C cuda-archs=90a`."


FLAVOUR = Fa3()
