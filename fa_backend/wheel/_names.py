"""The names a distribution's files carry: its name on an index, its import package, its compiled
module, its tag family and the project directory that builds it. Each flavour has one Names;
the metadata, the repack, verify and the runtime guard read it, never a flavour's name."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Names:
    flavour: str  # as [tool.fa-shim] `flavour` says it: "fa2", "fa3"
    dist: str  # the distribution's name on an index
    package: str  # the import package the runtime guard ships in
    module: str  # the compiled extension's import name
    abi3: bool  # one module for every CPython from its limited API's version on (cpXY-abi3)
    project: str = "."  # the directory of fa-shim's checkout that builds it

    @property
    def file_name(self) -> str:
        """The distribution's name in file names (PEP 427: - becomes _)."""
        return self.dist.replace("-", "_")

    @property
    def module_path(self) -> str:
        """The extension's path in a wheel, without its suffix: flash_attn_3/_C."""
        return self.module.replace(".", "/")

    @property
    def guard_path(self) -> str:
        return f"{self.package}/_fa_shim_guard.py"

    @property
    def project_label(self) -> str:
        """How messages name the project: fa-shim's root, or flash-attn-3/ (flavour fa3)."""
        if self.project == ".":
            return "fa-shim's root"
        return f"{self.project}/ (flavour {self.flavour})"
