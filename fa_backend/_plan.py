"""The typed facts one build passes from step to step: the Plan (what to build, decided
cheaply), the Tools (toolchain decisions, made once) and Prepared (a source tree ready to
compile). Data only: the steps that make them live in _build."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from packaging import tags

from . import _kernels, _metadata
from ._archs import ArchChoice
from ._compile_commands import Command
from ._patches import Patch
from ._sdist import Sdist
from ._settings import Settings
from ._toolchain import Nvcc
from ._torch import TorchInfo

STATS_FILE = "compile-stats.jsonl"  # the compiler launcher's record of each TU, in the scratch


def stats_file(scratch: Path) -> Path:
    """Where the compiler launcher records each TU of the upstream run in scratch."""
    return scratch / STATS_FILE


@dataclasses.dataclass(frozen=True)
class Plan:
    settings: Settings
    torch: TorchInfo
    sdist: Sdist
    patches: tuple[Patch, ...]
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
        return stats_file(self.source.parent)  # the source is extracted into the scratch
