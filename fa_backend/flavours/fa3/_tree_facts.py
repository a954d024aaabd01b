"""What FlashAttention-3's pinned hopper tree says of itself, read before anything is built: its
`__version__`, its PKG-INFO, and whether its setup.py builds what the registry claims."""

from __future__ import annotations

import ast
import re

from packaging.version import InvalidVersion, Version

from ...core._errors import FaShimError
from ...toolchain import _compile_commands
from . import _releases, _trees, _units

_VERSION = re.compile(r"^__version__\s*=\s*(.+)$", re.MULTILINE)
_TARGET = re.compile(r"-DTORCH_TARGET_VERSION=(0x[0-9A-Fa-f]+)")


def read(tree: _trees.Tree, rel: str) -> str:
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


def pkg_info(release: _releases.Fa3Release, python: str) -> str:
    """The PKG-INFO hopper/setup.py's setup() would write (FA3 has no sdist), torch left out."""
    return (
        "Metadata-Version: 2.1\n"
        "Name: flash-attn-3\n"
        "Version: 0\n"
        f"Summary: FlashAttention-3 (flash-attention {release.described}, hopper/), built by "
        "fa-shim\n"
        "Home-page: https://github.com/Dao-AILab/flash-attention\n"
        "License: BSD-3-Clause\n"
        f"Requires-Python: >={python}\n"
        "Requires-Dist: einops\n"
        "Requires-Dist: packaging\n"
        "Requires-Dist: ninja\n"
    )


def check_stable_claim(release: _releases.Fa3Release, setup_py: str) -> None:
    """A stable line's setup.py builds flash_api_stable.cpp for the release's target."""
    targets = {_compile_commands.target_version(v) for v in _TARGET.findall(setup_py)}
    if _units.api_source(release) not in setup_py or targets != {release.torch_target}:
        raise FaShimError(
            f"vendored_patches/fa3/{release.version}/release.toml says torch's stable ABI from "
            f"torch {release.torch_target}, but its hopper/setup.py builds "
            f"{_units.api_source(release)} with TORCH_TARGET_VERSION "
            f"{', '.join(sorted(str(t) for t in targets)) or 'never'}.",
            fix=f"correct release.toml ({_releases.GUIDE}).",
        )
