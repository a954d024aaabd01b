"""A release directory's files under vendored_patches/: its `release.toml` (what a flavour knows of
an upstream release), whose `patches` are files in the flavour's shared `patches/` directory, and
`units.json`, each compile unit's measured peak memory and time (one architecture per job), folded
by `bench/unit_table.py` from a build's records (pipeline/_stats) so that jobs are planned by what
the compilers showed (issue 24):

    {"about": "...", "measured": [...], "units": {"<unit>": {"peak_mib": 6717, "seconds": 303.9}}}
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..core._errors import FaShimError
from ..core._toml import tomllib
from ._vocabulary import did_you_mean

RELEASE_FILE = "release.toml"
PATCH_DIR = "patches"
TABLE_FILE = "units.json"
MIB = 1024**2


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


def is_version(name: str) -> bool:
    try:
        Version(name)
    except InvalidVersion:
        return False
    return True


def patch_files(
    data: dict, directory: Path, strays: bool = True
) -> tuple[tuple[Path, ...], list[str]]:
    """The `patches` of the release.toml in directory (file names in the flavour's patches/
    beside it, in the order they apply) as paths, and what is wrong with them; with `strays`,
    also the patch files lying beside the release.toml (asked once per release)."""
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
        for p in sorted(directory.glob("*.patch") if strays else ())
    ]
    return tuple(patch_dir / name for name in listed), problems


@dataclasses.dataclass(frozen=True)
class UnitTable:
    units: Mapping[str, Mapping[str, float]]

    def _first(self, names: tuple[str, ...], field: str) -> float | None:
        """The field of the first of these names the table has it for."""
        return next((v for name in names if (v := self.units.get(name, {}).get(field))), None)

    def peak_bytes(self, *names: str) -> int | None:
        peak = self._first(names, "peak_mib")
        return None if peak is None else int(peak * MIB)

    def seconds(self, *names: str) -> float | None:
        seconds = self._first(names, "seconds")
        return None if seconds is None else float(seconds)


def load_units(release_dir: Path) -> UnitTable | None:
    """The release's table, None where it has none."""
    file = release_dir / TABLE_FILE
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        return UnitTable({str(k): dict(v) for k, v in data["units"].items()})
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FaShimError(
            f"{file} is not a table of compile units ({exc}).",
            fix="regenerate it with bench/unit_table.py (docs/benchmarks.md).",
        ) from None
