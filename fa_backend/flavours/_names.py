"""The two distributions fa-shim builds, and the names each one's files carry: one place for
them, read by the metadata, the repack, verify and the runtime guard's patch.

fa2 is flash-attn (FlashAttention-2, the root project, from the upstream sdist); fa3 is
flash-attn-3 (FlashAttention-3, the flash-attn-3/ project, from upstream's hopper/ tree:
docs/fa3-design.md). A project says which it is in [tool.fa-shim] `flavour`.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Flavour:
    name: str  # "fa2" or "fa3", as [tool.fa-shim] says it
    dist: str  # the distribution's name on an index
    package: str  # the import package the runtime guard ships in
    module: str  # the compiled extension's import name
    abi3: bool  # one module for CPython >= 3.9 (the limited API), as upstream tags it

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


FA2 = Flavour("fa2", "flash-attn", "flash_attn", "flash_attn_2_cuda", abi3=False)
FA3 = Flavour("fa3", "flash-attn-3", "flash_attn_3", "flash_attn_3._C", abi3=True)
FLAVOURS = {f.name: f for f in (FA2, FA3)}


def of_package(top_levels: set[str]) -> Flavour | None:
    """The flavour of a wheel or site-packages entry by the packages it holds."""
    for flavour in (FA3, FA2):  # flash_attn_3 first: an FA3 wheel holds no flash_attn
        if flavour.package in top_levels:
            return flavour
    return None
