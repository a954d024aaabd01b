"""The flavour interface: what a distribution fa-shim builds must say, and the plan it makes.
The pipeline calls these methods and never asks which flavour it runs; a flavour keeps what it
compiles in `Plan.source`, a value only it reads. A new one is a subclass, registered (_registry).
"""

from __future__ import annotations

import abc
import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core._version import __version__
from ..resources import CHECKOUT
from ..wheel import _metadata
from ..wheel._metadata import Names
from ..wheel._sdist_self import SdistSpec

if TYPE_CHECKING:
    from packaging import tags

    from ..schedule._schedule import Machine
    from ..settings._model import Setting, Settings
    from ..sources._patches import Patch
    from ..toolchain._archs import ArchChoice
    from ..toolchain._compile_commands import Command
    from ..toolchain._compilers import Nvcc
    from ..toolchain._torch import TorchInfo


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one build makes, decided cheaply (nothing extracted or compiled)."""

    settings: Settings
    torch: TorchInfo
    flavour: Flavour
    source: Any  # the flavour's own: what it compiles, how it is pinned, its kernel set
    patches: tuple[Patch, ...]
    version: str
    tag: tags.Tag
    metadata: str
    # built against torch's stable ABI: the oldest torch the module runs on (its
    # TORCH_TARGET_VERSION, checked in the compile commands), any release from there on of the
    # build's CUDA major; None: bound to the build torch's release (its C++ ABI)
    stable_abi: str | None = None

    @property
    def names(self) -> Names:
        return self.flavour.names

    @property
    def dist_info(self) -> str:
        return f"{self.names.file_name}-{self.version}.dist-info"

    @property
    def wheel_name(self) -> str:
        return _metadata.wheel_filename(self.version, self.tag, self.names)

    @property
    def kernel_set(self) -> dict:
        return self.flavour.kernel_set(self)


@dataclasses.dataclass(frozen=True)
class Sizing:
    """Jobs, nvcc threads, how the flavour cuts its sources into units (`shape`: its own knobs,
    passed on in Tools and recorded, never read) and why the jobs are fewer than the machine's
    plan ("not 16: ..."; None: they are not)."""

    jobs: int
    threads: int
    shape: Mapping[str, int] = dataclasses.field(default_factory=dict)
    cut: str | None = None


@dataclasses.dataclass(frozen=True)
class Costs:
    """A flavour's cost model of its sources (basenames), one core and one architecture each:
    seconds, peak bytes and the settings that would shorten a long build, each with its seconds.
    None: not modelled (no estimate; one memory figure per unit; no suggestions)."""

    seconds: Callable[[str], float] | None
    peak_bytes: Callable[[str], int] | None = None
    faster: Callable[[Tools, Sequence[str], Machine], list[tuple[float, str]]] | None = None


@dataclasses.dataclass(frozen=True)
class Tools:
    """The toolchain decisions of one build, made once (environment, fingerprint, provenance)."""

    nvcc: Nvcc | None
    archs: ArchChoice | None
    jobs: int
    nvcc_threads: int | None
    compiler_cache: str | None
    shape: Mapping[str, int] = dataclasses.field(default_factory=dict)  # Sizing.shape


class Flavour(abc.ABC):
    """One distribution fa-shim builds: subclasses set `names` and `own_settings` and implement
    the abstract methods."""

    names: Names
    own_settings: tuple[Setting, ...] = ()  # the settings it takes and no other flavour does
    sources_key = "sources"  # the provenance entry `sources()` fills
    # its keys that say where the sources were found, not what they are (kept out of provenance)
    sources_how: tuple[str, ...] = ("origin",)

    # ------------------------------------------------------------------------------- plan

    @abc.abstractmethod
    def plan(self, settings: Settings, torch: TorchInfo) -> Plan:
        """Locate and pin the sources, choose the kernel set, name and describe the wheel."""

    @abc.abstractmethod
    def sources(self, plan: Plan, with_origin: bool) -> dict:
        """What is compiled, by its pins (with where each came from, for the provenance)."""

    @abc.abstractmethod
    def upstream_version(self, plan: Plan) -> str:
        """The upstream release the sources are (provenance's flash_attn_version)."""

    @abc.abstractmethod
    def kernel_set(self, plan: Plan) -> dict:
        """The kernel set, as provenance and the fingerprint record it."""

    def kernel_set_name(self, plan: Plan) -> str:
        return str(self.kernel_set(plan).get("label") or "full")

    # ---------------------------------------------------------------------------- toolchain

    def needs_nvcc(self, plan: Plan) -> bool:
        return True

    @abc.abstractmethod
    def archs(self, settings: Settings, torch: TorchInfo, nvcc: Path) -> ArchChoice:
        """The GPU architectures to compile, from the settings, the GPUs and nvcc."""

    @abc.abstractmethod
    def sizing(self, plan: Plan, archs: ArchChoice | None, cores: int, memory: int) -> Sizing:
        """Compile jobs and nvcc threads for this set on this machine."""

    # ------------------------------------------------------------------------------ prepare

    @abc.abstractmethod
    def lay_out(self, plan: Plan, tools: Tools, dest: Path) -> Path:
        """Unpack and patch the sources under dest; return the directory of setup.py."""

    def environment(self, plan: Plan, tools: Tools) -> dict[str, str]:
        """Variables for upstream's setup.py beyond the toolchain's (e.g. its switches)."""
        return {}

    def torch_free_kernels(self, plan: Plan) -> bool:
        """Whether the CUDA sources include no torch or Python header (their objects then serve
        every torch of a toolkit: fleet/_objects)."""
        return False

    def driver_spec(self, plan: Plan, tools: Tools, source: Path) -> dict:
        """What the upstream driver does to setup.py's extensions (resources/upstream_driver):
        exclude_sources, defines, heavy_sources_first, split_sources, setup_requires_met (the
        setup_requires it leaves out: met by fa-shim, never fetched inside the seal)."""
        return {}

    @abc.abstractmethod
    def check(self, plan: Plan, tools: Tools, commands: Sequence[Command]) -> None:
        """build.ninja compiles what the plan says (the set, the architectures), or raise."""

    # ------------------------------------------------------------------ estimate and space

    def planned_sources(self, plan: Plan, tools: Tools) -> list[str] | None:
        """The sources a build would compile, before anything is extracted (None: unknown)."""
        return None

    def costs(self, plan: Plan) -> Costs | None:
        """The estimate's one hook: the plan's cost model (None: none; the estimate says so)."""
        return None

    def shape_note(self, shape: Mapping[str, int]) -> str | None:
        """How this Sizing.shape cuts the compile, in words (doctor; None: as upstream does)."""
        return None

    @abc.abstractmethod
    def disk_needs(self, plan: Plan, tools: Tools) -> tuple[int, int]:
        """(scratch peak, wheel size) in bytes, erring high."""

    # ------------------------------------------------------------------------------- sdist

    def sdist_contents(self, settings: Settings) -> SdistSpec:
        """What an sdist of this flavour's project packs: by default the project alone."""
        return SdistSpec(__version__, {}, ("LICENSE",))

    # ------------------------------------------------------------------------------ advice

    def torch_lines(self, settings: Settings, torch: TorchInfo) -> dict[str, str]:
        """Each line this flavour builds (per-torch, stable ABI) and whether this torch can take
        it, with why (doctor says so); {} where it has one line."""
        return {}

    def project_dir(self) -> Path:
        """This project in the checkout fa_backend runs from (else a placeholder path)."""
        pyproject = CHECKOUT / "pyproject.toml"
        ours = pyproject.is_file() and 'build-backend = "fa_backend"' in pyproject.read_text()
        root = CHECKOUT if ours else Path("/path/to/fa-shim")
        return root / self.names.project if self.names.project != "." else root

    def rebuild_command(self) -> str:
        """pip on this project in the checkout fa_backend runs from (else a placeholder path)."""
        return (
            f"{sys.executable} -m pip install --no-build-isolation --no-deps --force-reinstall "
            f"{self.project_dir()}"
        )

    def unsupported_gpu(self, sm: int) -> tuple[str, str] | None:
        """(why, fix) where no build of this flavour runs on compute capability sm / 10."""
        return None

    def arch_advice(self, gpus_sm: Sequence[int]) -> str:
        """The fix for a module that has no code for these GPUs (compute capability x 10)."""
        archs = ";".join(str(sm) for sm in sorted(set(gpus_sm)))
        return (
            f"rebuild with the GPU's architecture: `{self.rebuild_command()} "
            f"-C cuda-archs={archs}`."
        )
