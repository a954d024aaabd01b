"""A source tree ready to compile: laid out and patched by the flavour, its build.ninja written by
torch and checked (the prepare step's result, which the compile step takes)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..flavours._interface import Tools
from ..toolchain._compile_commands import Command
from . import _stats
from ._compile_plan import CompilePlan


@dataclasses.dataclass
class Prepared:
    source: Path  # the directory of upstream's setup.py
    tools: Tools
    ninja_file: Path
    commands: list[Command]
    report: dict  # the upstream driver's (resources/upstream_driver)
    log: Path
    compile_plan: CompilePlan | None = None  # order and pools (None: the jobs alone)
    cached: frozenset[str] = frozenset()  # sources the object cache serves (no compile)

    @property
    def stats_file(self) -> Path:
        # the run's own files sit beside the source tree (FA3: beside hopper/, in the layout)
        return _stats.stats_file(self.source.parent)
