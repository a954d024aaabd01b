"""FlashAttention-2 (flash-attn) as a flavour: the upstream sdist, pinned, patched, cut to a
kernel set and compiled by its own setup.py."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from packaging.version import Version

from .. import api
from ..api import Costs, FaShimError, Flavour, Names, Plan, SdistSpec, Sizing, Tools, did_you_mean
from . import _costs, _kernels, _releases, _sdist, _settings, _tu_parts

TORCH_ABIS = ("torch", "stable")


def stable_line(settings, torch) -> _releases.StableLine | None:
    """The release's stable-ABI binding where -C torch-abi=stable asks for it (None: the
    per-torch build), refused for a release without one or a torch it does not serve."""
    word = str(settings.torch_abi).strip().lower()
    if word not in TORCH_ABIS:
        raise FaShimError(
            f"setting torch-abi is {settings.torch_abi!r}, expected one of "
            f"{', '.join(TORCH_ABIS)}{did_you_mean(word, TORCH_ABIS, ' (did you mean {!r}?)')}.",
            fix="pass -C torch-abi=torch (the default: a wheel for this torch) or "
            "-C torch-abi=stable (one wheel for every torch >= 2.10).",
        )
    if word == "torch":
        return None
    version = settings.flash_attn_version
    line = _releases.release(version).stable if version else None
    per_torch = "or build the per-torch wheel: -C torch-abi=torch (docs/guides/stable-abi.md)"
    if line is None:
        having = [v for v in _releases.known() if _releases.release(v).stable]
        build = f"-C flash-attn-version={having[-1] if having else '...'}"
        cause = f"flash-attn {version} has"
        if settings.sdist and having:  # the file decides the release (_sdist.of_the_given_sdist)
            other = _releases.release(having[-1]).sdist
            build = f"its sdist: -C sdist={settings.sdist.with_name(other)}"
            cause = f"{settings.sdist} (setting sdist) is flash-attn {version}, which has"
        raise FaShimError(
            f"{cause} no binding on torch's stable ABI in fa-shim (-C torch-abi=stable; "
            f"releases with one: {', '.join(having) or 'none'}).",
            fix=f"build one of those ({build}), " + per_torch + ".",
        )
    if torch.cuda is None:
        raise FaShimError(
            f"torch {torch.version} has no CUDA: -C torch-abi=stable builds flash-attn's CUDA "
            "kernels for the CUDA major of the torch it is built with.",
            fix="install a CUDA build of torch >= " + line.torch_target + ".",
        )
    if Version(Version(torch.version).public) < Version(line.torch_target):
        raise FaShimError(
            f"-C torch-abi=stable builds flash-attn {version} on torch's stable ABI, for torch >= "
            f"{line.torch_target}; this torch is {torch.version}.",
            fix=f"install torch >= {line.torch_target}, " + per_torch + ".",
        )
    return line


@dataclasses.dataclass(frozen=True)
class Fa2Source:
    """What an FA2 build compiles: the sdist and the kernel set cut from it."""

    sdist: _sdist.Sdist
    tailoring: _kernels.Tailoring

    @property
    def release(self) -> _releases.Release:
        return _releases.release(self.sdist.version)

    @property
    def kernels(self) -> list[str] | None:
        """The set's kernel sources, sorted (None: a release whose layout fa-shim does not know)."""
        if not self.release.kernels:
            return None
        return sorted(_kernels.expected_kernels(self.tailoring, self.sdist.version))


# Sizing.shape: the kernel sources compiled as this many parts each (_tu_parts), but for this
# many of the shortest (by the cost model), kept whole: 0 where a tailored set splits them all
PARTS, WHOLE = "tu_parts", "tu_parts_whole"


class Fa2(Flavour):
    names = Names("fa2", "flash-attn", "flash_attn", "flash_attn_2_cuda", abi3=False)
    own_settings = _settings.OWN
    sources_key = "sdist"

    def plan(self, settings, torch) -> Plan:
        settings = _sdist.of_the_given_sdist(settings)
        line = stable_line(settings, torch)  # refused before any sdist is fetched
        sdist = _sdist.locate(settings)
        patches = tuple(_releases.patches(sdist.version)) if sdist.pinned else ()
        tailoring = _kernels.tailoring(settings, sdist.version)
        floor = line.torch_target if line else None
        # a stable-ABI module claims no one torch release: its CUDA major and floor instead
        bound = api.stable_abi_label(torch.cuda, floor) if line else torch.label
        version = api.full_version(sdist.version, bound + tailoring.label)
        pkg_info = api.read_pkg_info(sdist.path)
        _sdist.check_version(sdist, pkg_info)
        metadata = api.core_metadata(pkg_info, version, api.torch_requirement(torch.version, floor))
        names = self.names
        if line:
            patches += tuple(api.read_patches(line.patches))
            names = dataclasses.replace(names, abi3=True)
        tag = api.wheel_tag(names, torch.limited_api if line else None)
        source = Fa2Source(sdist, tailoring)
        return Plan(settings, torch, self, source, patches, version, tag, metadata, floor)

    def torch_lines(self, settings, torch) -> dict[str, str]:
        lines = {"per-torch": f"yes, a wheel for torch {torch.version} alone (-C torch-abi=torch)"}
        try:
            own = {**settings.own, "torch-abi": "stable"}
            line = stable_line(dataclasses.replace(settings, own=own), torch)
        except FaShimError as exc:  # its refusal says why, e.g. the floor
            lines["stable"] = f"no: {exc.cause}"
        else:
            lines["stable"] = (
                f"yes, one wheel for every torch >= {line.torch_target} of CUDA "
                f"{torch.cuda_major} (-C torch-abi=stable)"
            )
        return lines

    def sources(self, plan: Plan, with_origin: bool) -> dict:
        sdist = plan.source.sdist
        found = {"sha256": sdist.sha256}
        if with_origin:
            found.update(pinned=sdist.pinned, origin=sdist.origin, file=sdist.path.name)
        return found

    def upstream_version(self, plan: Plan) -> str:
        return plan.source.sdist.version

    def kernel_set(self, plan: Plan) -> dict:
        return plan.source.tailoring.describe()

    def kernel_set_name(self, plan: Plan) -> str:
        return plan.source.tailoring.kernel_set

    def needs_nvcc(self, plan: Plan) -> bool:
        # asked on every build, wheel-cache hits included: remembered per sdist sha256
        memo = plan.settings.resolved_cache_dir / "sdist-facts"
        return _sdist.has_cuda_sources(plan.source.sdist, memo)

    def archs(self, settings, torch, nvcc: Path) -> api.ArchChoice:
        mechanism = _releases.release(settings.flash_attn_version).archs
        return api.resolve_archs(settings, torch, nvcc, mechanism, os.environ)

    def sizing(self, plan: Plan, archs, cores: int, memory: int) -> Sizing:
        s, source = plan.settings, plan.source
        n_archs = len(archs.targets) if archs else 1
        kernels = source.kernels
        # idle job slots become parts of the kernel sources, and the parts more jobs
        idle = api.plan_jobs(cores, memory, n_archs, s.max_jobs, s.nvcc_threads)[0]
        disabled = len(source.tailoring.disabled)
        parts, whole = _costs.best_split(
            s.tu_parts, idle, cores, kernels, source.release.tu_parts, disabled
        )
        # the kernel TUs and flash_api.cpp, all compiled at once when cores and memory allow
        cut = _costs.cut_sources(kernels, whole) if kernels else None
        n_sources = len(_tu_parts.split_names(kernels, parts, cut)) + 1 if kernels else None
        jobs, threads = api.plan_jobs(cores, memory, n_archs, s.max_jobs, s.nvcc_threads, n_sources)
        shape = {PARTS: parts, WHOLE: whole}
        if parts > 1:
            api.info(f"compiling {self.shape_note(shape)} (-C tu-parts)")
        return Sizing(jobs, threads, shape)

    def _split(self, plan: Plan, tools: Tools) -> tuple[int, frozenset[str] | None]:
        """The parts and the kernel sources cut in them (None: every splittable one)."""
        parts, whole = tools.shape.get(PARTS, 1), tools.shape.get(WHOLE, 0)
        if parts < 2 or not whole:
            return parts, None
        return parts, _costs.cut_sources(plan.source.kernels, whole)

    def lay_out(self, plan: Plan, tools: Tools, dest: Path) -> Path:
        source = _sdist.extract(plan.source.sdist, dest)
        api.apply_patches(list(plan.patches), source)
        _tu_parts.write(source / _tu_parts.KERNEL_DIR, *self._split(plan, tools))
        return source

    def torch_free_kernels(self, plan: Plan) -> bool:
        # the vendored patch that takes torch out of the kernel sources
        return any(p.name == "50-torch-free-kernels.patch" for p in plan.patches)

    def driver_spec(self, plan: Plan, tools: Tools, source: Path) -> dict:
        tailoring = plan.source.tailoring
        return {
            "exclude_sources": list(tailoring.exclude_sources),
            "defines": list(tailoring.defines),
            "heavy_sources_first": list(plan.source.release.naming.heavy_first),
            "split_sources": _tu_parts.layout(
                source / _tu_parts.KERNEL_DIR, *self._split(plan, tools)
            ),
            # setup.py's setup_requires since 2.6: fa-shim's build requirements carry packaging
            # and ninja, and upstream imports psutil only where MAX_JOBS is unset (never here)
            "setup_requires_met": ["packaging", "psutil", "ninja"],
        }

    def check(self, plan: Plan, tools: Tools, commands: Sequence) -> None:
        if tools.archs:
            api.check_gencodes(commands, tools.archs.targets)
        _kernels.check_sources(commands, plan.source.tailoring, plan.source.sdist.version)

    def planned_sources(self, plan: Plan, tools: Tools) -> list[str] | None:
        return _costs.planned_sources(
            plan.source, tools.shape.get(PARTS, 1), tools.shape.get(WHOLE, 0)
        )

    def costs(self, plan: Plan) -> Costs:
        return Costs(
            _costs.model(len(plan.source.tailoring.disabled)),
            _costs.memory_model(plan.source.sdist.version, plan.source.sdist.pinned),
            lambda tools, sources, machine: _costs.faster_options(plan, tools, sources, machine),
        )

    def disk_needs(self, plan: Plan, tools: Tools) -> tuple[int, int]:
        source = plan.source
        archs = len(tools.archs.targets) if tools.archs else 1
        if source.release.kernels:
            kernels = len(source.kernels)
        else:
            kernels = api.FULL_KERNELS if source.sdist.pinned else None
        return api.compile_needs(kernels, archs, source.sdist.path.stat().st_size)

    def shape_note(self, shape) -> str | None:
        parts, whole = shape.get(PARTS, 1), shape.get(WHOLE, 0)
        if parts < 2:
            return None
        but = f" but the {whole} shortest" if whole else ""
        return f"each kernel source{but} in {parts} parts"

    def sdist_contents(self, settings) -> SdistSpec:
        version = settings.flash_attn_version or "0"
        files = ("README.md", "LICENSE", "vendored_patches")
        return SdistSpec(version, {"flash-attn-version": version}, files)

    def unsupported_gpu(self, sm: int) -> tuple[str, str] | None:
        if sm < api.MIN_ARCH:
            return (
                "flash-attn 2 needs 8.0 (Ampere) or newer",
                "run on an Ampere, Ada, Hopper or Blackwell GPU.",
            )
        return None

    def arch_advice(self, gpus_sm: Sequence[int]) -> str:
        if all(self.unsupported_gpu(sm) for sm in gpus_sm):
            return "flash-attn 2 needs compute capability 8.0 (Ampere) or newer; use a newer GPU."
        return super().arch_advice(gpus_sm)


FLAVOUR = Fa2()
