"""The release registries' files: each flavour keeps what it knows of an upstream release in a
`release.toml` under vendored_patches/, which lists the patches applied to it: one file per
distinct patch in the flavour's `patches/` directory, shared by the releases it applies to."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from ..core._errors import FaShimError
from ._vocabulary import did_you_mean

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.9/3.10 only
    import tomli as tomllib

RELEASE_FILE = "release.toml"
PATCH_DIR = "patches"


def read_toml(path: Path, guide: str) -> dict:
    """A release.toml's table; bad TOML is one error pointing at the guide to its keys."""
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FaShimError(
            f"{path} is not valid TOML ({exc}).", fix=f"correct its syntax ({guide})."
        ) from None


def key_hint(value: str, known: Iterable[str]) -> str:
    """(did you mean 'x'?) for a mistyped key or value of a release.toml."""
    return did_you_mean(value, known, " (did you mean {!r}?)", cutoff=0.6)


def patch_files(data: dict, directory: Path) -> tuple[tuple[Path, ...], list[str]]:
    """The `patches` of the release.toml in directory (file names in the flavour's patches/
    beside it, in the order they apply) as paths, and what is wrong with them."""
    patch_dir = directory.parent / PATCH_DIR
    listed = data.get("patches", [])
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        return (), [f"patches = {listed!r} is not a list of file names in {patch_dir}"]
    problems = [
        f"patches lists {name!r}, which is not a file in {patch_dir}"
        for name in listed
        if Path(name).name != name or not (patch_dir / name).is_file()
    ]
    problems += [  # the old layout: nothing would apply it
        f"{p.name} lies beside {RELEASE_FILE}, where nothing applies it (move it to {patch_dir}/ "
        "and list it in patches)"
        for p in sorted(directory.glob("*.patch"))
    ]
    return tuple(patch_dir / name for name in listed), problems
