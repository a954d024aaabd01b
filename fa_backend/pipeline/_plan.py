"""The typed facts one build passes from step to step: the Plan (what to build, decided
cheaply), the Tools (toolchain decisions, made once) and Prepared (a source tree ready to
compile). Data only: the steps that make them live in _build."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from packaging import tags

from ..flavours._names import FA2, FA3, Flavour
from ..flavours.fa2 import _kernels
from ..flavours.fa2._sdist import Sdist
from ..flavours.fa3._fa3_kernels import Fa3Tailoring
from ..flavours.fa3._fa3_releases import Fa3Release
from ..flavours.fa3._fa3_sources import Sources
from ..settings._settings import Settings
from ..toolchain._archs import ArchChoice
from ..toolchain._compilers import Nvcc
from ..toolchain._torch import TorchInfo
from ..wheel import _metadata
from ._compile_commands import Command
from ._patches import Patch

STATS_FILE = "compile-stats.jsonl"  # the compiler launcher's record of each TU, in the scratch


def stats_file(scratch: Path) -> Path:
    """Where the compiler launcher records each TU of the upstream run in scratch."""
    return scratch / STATS_FILE


@dataclasses.dataclass(frozen=True)
class Fa3Source:
    """What a FlashAttention-3 build compiles: its release, both pinned trees, the set."""

    release: Fa3Release
    sources: Sources
    tailoring: Fa3Tailoring


@dataclasses.dataclass(frozen=True)
class Plan:
    settings: Settings
    torch: TorchInfo
    sdist: Sdist | None  # FA2's upstream sdist; None for FA3, whose sources are `fa3`
    patches: tuple[Patch, ...]
    version: str
    tag: tags.Tag
    metadata: str
    tailoring: _kernels.Tailoring = _kernels.FULL
    fa3: Fa3Source | None = None

    @property
    def flavour(self) -> Flavour:
        return FA3 if self.fa3 else FA2

    @property
    def dist_info(self) -> str:
        return _metadata.dist_info_name(self.version, self.flavour)

    @property
    def wheel_name(self) -> str:
        return _metadata.wheel_filename(self.version, self.tag, self.flavour)

    @property
    def kernel_set(self) -> object:
        """The set, as provenance and the fingerprint record it."""
        if self.fa3:
            t = self.fa3.tailoring
            return {"label": t.label.lstrip(".") or "full", "switches": dict(t.env)}
        return self.tailoring.describe()


@dataclasses.dataclass(frozen=True)
class Tools:
    """The toolchain decisions of one build, made once: they feed the child's environment, the
    wheel-cache fingerprint and the provenance."""

    nvcc: Nvcc | None
    archs: ArchChoice | None
    jobs: int
    nvcc_threads: int | None
    compiler_cache: str | None
    tu_parts: int = 1  # forward kernel sources compiled as this many parts (see _tu_parts)


@dataclasses.dataclass
class Prepared:
    """An extracted, patched source tree whose build.ninja torch has written."""

    source: Path
    tools: Tools
    ninja_file: Path
    commands: list[Command]
    report: dict
    log: Path

    @property
    def stats_file(self) -> Path:
        # the run's own files sit beside the source tree (FA3: beside hopper/, in the layout)
        return stats_file(self.source.parent)
