"""What fa-shim knows about each FlashAttention-3 source release, one directory per release.

`vendored_patches/fa3/<version>/` holds `release.toml` (the flash-attention tag and commit whose
`hopper/` is built, the CUTLASS commit that tag pins as `csrc/cutlass`, and both trees' content
pins, see _sources) and the `*.patch` files applied to `hopper/`, in name order. It sits one
level below FA2's `vendored_patches/<version>/`, so `_releases.known()` never lists it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ...core._errors import FaShimError
from ...resources import VENDORED
from .._release_files import RELEASE_FILE, key_hint, read_toml

FA3_DIR = VENDORED / "fa3"

_COMMIT = r"[0-9a-f]{40}"
_PIN = r"[0-9a-f]{64}"
# key: (pattern its value matches, what it holds)
_KEYS = {
    "tag": (r"v\S+", "the flash-attention tag, e.g. v2.8.3"),
    "commit": (_COMMIT, "the tag's commit, 40 lowercase hex digits"),
    "hopper-tree": (_PIN, "the content pin of LICENSE + hopper/, 64 lowercase hex digits"),
    "cutlass-commit": (_COMMIT, "the csrc/cutlass submodule commit, 40 lowercase hex digits"),
    "cutlass-tree": (_PIN, "the content pin of LICENSE.txt + include/, 64 lowercase hex digits"),
}
# optional key: (what it holds); a release without it compiles setup.py's units as they are
_FLAGS = {
    "split-aggregates": "true or false: compile the per-head-dim files that setup.py's "
    "hdimall/hdimdiff units include, each as a unit (flavours/fa3/_units.py)",
}


@dataclasses.dataclass(frozen=True)
class Fa3Release:
    version: str  # the flash-attention release, e.g. 2.8.3
    tag: str
    commit: str
    hopper_pin: str
    cutlass_commit: str
    cutlass_pin: str
    patches: tuple[Path, ...]
    split_aggregates: bool = False


def known(root: Path = FA3_DIR) -> list[str]:
    """The versions with a release directory."""
    return sorted((p.parent.name for p in root.glob(f"*/{RELEASE_FILE}")), key=Version)


@functools.cache
def release(version: str, root: Path = FA3_DIR) -> Fa3Release:
    directory = root / version
    if not (directory / RELEASE_FILE).is_file():
        listed = ", ".join(known(root)) or "none"
        raise FaShimError(
            f"fa-shim knows no FlashAttention-3 sources for flash-attention {version} "
            f"(no {directory / RELEASE_FILE}).",
            fix=f"use one of: {listed}.",
        )
    return load(directory)


def load(directory: Path) -> Fa3Release:
    path = directory / RELEASE_FILE
    data = read_toml(path, "docs/fa3-design.md")
    keys = {**_KEYS, **_FLAGS}
    problems = [f"unknown key {k!r}{key_hint(k, keys)}" for k in data if k not in keys]
    problems += [
        f"{k} = {data[k]!r} is not true or false"
        for k in _FLAGS
        if k in data and not isinstance(data[k], bool)
    ]
    for key, (pattern, meaning) in _KEYS.items():
        value = data.get(key)
        if value is None:
            problems.append(f"{key} is missing ({meaning})")
        elif not (isinstance(value, str) and re.fullmatch(pattern, value)):
            problems.append(f"{key} = {value!r} is not {meaning}")
    try:
        if data.get("tag") and Version(directory.name) != Version(data["tag"]):
            problems.append(f"tag = {data['tag']!r} is not v{directory.name}")
    except InvalidVersion:
        problems.append(f"its directory name {directory.name!r} is not a PEP 440 version")
    if problems:
        raise FaShimError(
            f"{path} does not describe FlashAttention-3 sources fa-shim can use: "
            f"{'; '.join(problems)}.",
            fix="correct it: keys are "
            + "; ".join(f"{k} ({m})" for k, (_, m) in _KEYS.items())
            + " (docs/fa3-design.md).",
        )
    return Fa3Release(
        directory.name,
        data["tag"],
        data["commit"],
        data["hopper-tree"],
        data["cutlass-commit"],
        data["cutlass-tree"],
        tuple(sorted(directory.glob("*.patch"))),
        data.get("split-aggregates") is True,
    )
