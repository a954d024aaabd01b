"""What fa-shim knows about each FlashAttention-3 source state ("line": a tag such as `2.8.3` or a
branch's commit such as `main-0251105a`): `vendored_patches/fa3/<line>/release.toml`, its keys
below (docs/fa3-design.md). The `fa3-release` setting picks a line: choose().
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import re
from pathlib import Path

from packaging.version import Version

from ..api import (
    PATCH_DIR,
    RELEASE_FILE,
    VENDORED,
    FaShimError,
    did_you_mean,
    is_version,
    key_hint,
    patch_files,
    read_toml,
)

FA3_DIR = VENDORED / "fa3"
AUTO = "auto"
GUIDE = "docs/fa3-design.md"

_COMMIT = r"[0-9a-f]{40}"
_PIN = r"[0-9a-f]{64}"
_DATE = r"\d{4}-\d{2}-\d{2}"
ABIS = ("torch", "stable")
UNITS = ("aggregate", "split", "per-head-dim")
# key: (pattern its value matches, what it holds, required)
_KEYS = {
    "tag": (r"v\S+", "the flash-attention tag, e.g. v2.8.3 (a branch's commit has none)", True),
    "commit": (_COMMIT, "the commit, 40 lowercase hex digits", True),
    "date": (_DATE, "the commit's date, YYYY-MM-DD (orders the lines)", True),
    "hopper-tree": (_PIN, "the content pin of LICENSE + hopper/, 64 lowercase hex digits", True),
    "cutlass-commit": (_COMMIT, "the csrc/cutlass submodule commit, 40 lowercase hex digits", True),
    "cutlass-tree": (_PIN, "the content pin of LICENSE.txt + include/, 64 hex digits", True),
    "torch-abi": ("|".join(ABIS), "torch (one torch release's C++ ABI) or stable", False),
    "torch-target": (r"\d+\.\d+\.\d+", "the oldest torch a stable module runs on: 2.9.0", False),
    "forward-units": (
        "|".join(UNITS),
        "aggregate (setup.py's hdimall/hdimdiff units), split (the per-head-dim files those "
        "include, each a unit: flavours/fa3/_units.py) or per-head-dim (setup.py's own)",
        True,
    ),
    "patches": (None, f"the files of vendored_patches/fa3/{PATCH_DIR}/ it applies in order", False),
}  # fmt: skip
_BRANCH_DIR = re.compile(r"(?P<branch>[a-z][a-z0-9.]*)-(?P<short>[0-9a-f]{8})")


@dataclasses.dataclass(frozen=True)
class Fa3Release:
    version: str  # the line's name: its directory (2.8.3, main-0251105a)
    tag: str | None
    commit: str
    date: str
    hopper_pin: str
    cutlass_commit: str
    cutlass_pin: str
    patches: tuple[Path, ...]
    torch_abi: str = "torch"
    torch_target: str | None = None  # with torch_abi "stable": the oldest torch it runs on
    forward_units: str = "aggregate"
    directory: Path | None = None  # its registry directory (release.toml, patches, units.json)

    @property
    def ref(self) -> str:
        """What upstream calls this state: its tag, else its full commit (archive names)."""
        return self.tag or self.commit

    @property
    def described(self) -> str:
        """v2.8.3, or main at 0251105a2fb1... (a branch's commit)."""
        return self.tag or f"{self.version.split('-')[0]} at {self.commit}"

    @property
    def split_aggregates(self) -> bool:
        """setup.py aggregates its forward units and fa-shim compiles what they include."""
        return self.forward_units == "split"

    @property
    def stable(self) -> bool:
        return self.torch_abi == "stable"

    @property
    def source_label(self) -> str:
        """The wheel label's source part: the tag (v2.8.3), else g + 8 hex digits, as git
        describe spells a commit (several upstream states say the same __version__)."""
        return self.tag or f"g{self.commit[:8]}"

    def serves(self, torch_version: str) -> bool:
        """A stable-ABI line builds its stable module only for torch >= its target."""
        # a pre-release of the target (2.9.0.dev...) counts as older: upstream's own cut-off
        # lies among the 2.9 nightlies, and the runtime guard reads versions the same way
        return not self.stable or Version(Version(torch_version).public) >= Version(
            self.torch_target
        )


def known(root: Path = FA3_DIR) -> list[str]:
    """The lines with a release directory, oldest first (by their commits' dates)."""
    names = [p.parent.name for p in root.glob(f"*/{RELEASE_FILE}")]
    return sorted(names, key=lambda n: (release(n, root).date, n))


@functools.cache
def release(version: str, root: Path = FA3_DIR) -> Fa3Release:
    directory = root / version
    if not (directory / RELEASE_FILE).is_file():
        listed = ", ".join(known(root)) or "none"
        raise FaShimError(
            f"fa-shim knows no FlashAttention-3 sources for flash-attention {version} "
            f"(no {directory / RELEASE_FILE}).",
            fix=f"use one of: {listed} (-C fa3-release=...).",
        )
    return load(directory)


def choose(wanted: str, torch_version: str, root: Path = FA3_DIR) -> Fa3Release:
    """The line the fa3-release setting names, or for `auto` the newest stable-ABI line this
    torch meets, else the newest torch-bound (tagged) one."""
    lines = [release(n, root) for n in known(root)]
    if wanted.strip().lower() != AUTO:
        return _named(wanted.strip(), lines, root)
    for line in reversed(lines):
        if line.stable and line.serves(torch_version):
            return line
    bound = [line for line in lines if not line.stable]
    if not bound:
        raise FaShimError(
            f"no FlashAttention-3 line fa-shim knows builds for torch {torch_version}.",
            fix="install torch " + " or ".join(f">= {x.torch_target}" for x in lines) + ".",
        )
    return bound[-1]


def _named(wanted: str, lines: list[Fa3Release], root: Path) -> Fa3Release:
    """A line by its name, its tag (v2.8.3) or a commit prefix of at least 7 hex digits."""
    text = wanted.lower()
    for line in lines:
        if text in (line.version, (line.tag or "").lower()):
            return line
    if re.fullmatch(r"[0-9a-f]{7,40}", text):
        found = [line for line in lines if line.commit.startswith(text)]
        if len(found) == 1:
            return found[0]
    names = [line.version for line in lines]
    raise FaShimError(
        f"fa3-release = {wanted!r} names no FlashAttention-3 line fa-shim knows."
        + did_you_mean(text, names),
        fix=f"use auto or one of: {', '.join(names)} (a tag or commit prefix of one works too).",
    )


def _problems(directory: Path, data: dict) -> list[str]:
    problems = [f"unknown key {k!r}{key_hint(k, _KEYS)}" for k in data if k not in _KEYS]
    for key, (pattern, meaning, required) in _KEYS.items():
        value = data.get(key)
        if pattern is None:  # patches: read by load()
            continue
        if value is None:
            if required and not (key == "tag" and not is_version(directory.name)):
                problems.append(f"{key} is missing ({meaning})")
        elif not (isinstance(value, str) and re.fullmatch(pattern, value)):
            problems.append(f"{key} = {value!r} is not {meaning}")
    if problems:
        return problems
    try:
        datetime.date.fromisoformat(data["date"])
    except ValueError:
        problems.append(f"date = {data['date']!r} is not a calendar date")
    if (data.get("torch-abi") == "stable") != ("torch-target" in data):
        problems.append("torch-target goes with torch-abi = 'stable', and only with it")
    name = directory.name
    if "tag" in data:
        if not is_version(name) or Version(name) != Version(data["tag"]):
            problems.append(f"tag = {data['tag']!r} is not v{name}")
    else:
        match = _BRANCH_DIR.fullmatch(name)
        if not match:
            problems.append(
                f"its directory name {name!r} is neither a tag's version nor "
                "<branch>-<the commit's first 8 hex digits>"
            )
        elif not data["commit"].startswith(match["short"]):
            problems.append(f"commit = {data['commit']!r} does not start with {match['short']}")
    return problems


def load(directory: Path) -> Fa3Release:
    path = directory / RELEASE_FILE
    data = read_toml(path, GUIDE)
    patches, wrong = patch_files(data, directory)
    problems = _problems(directory, data) + wrong
    if problems:
        raise FaShimError(
            f"{path} does not describe FlashAttention-3 sources fa-shim can use: "
            f"{'; '.join(problems)}.",
            fix="correct it: keys are "
            + "; ".join(f"{k} ({m})" for k, (_, m, _) in _KEYS.items())
            + f" ({GUIDE}).",
        )
    return Fa3Release(
        directory.name,
        data.get("tag"),
        data["commit"],
        data["date"],
        data["hopper-tree"],
        data["cutlass-commit"],
        data["cutlass-tree"],
        patches,
        data.get("torch-abi", "torch"),
        data.get("torch-target"),
        data["forward-units"],
        directory,
    )
