"""Under --no-build-isolation nobody installs [build-system] requires: check them ourselves, so
a missing one is one readable error instead of an ImportError deep in a child process."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

from packaging.requirements import Requirement

from ._errors import FaShimError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def unmet(pyproject: Path = PYPROJECT) -> list[str]:
    with pyproject.open("rb") as f:
        requires = tomllib.load(f)["build-system"]["requires"]
    problems = []
    for requirement in map(Requirement, requires):
        if requirement.marker and not requirement.marker.evaluate():
            continue
        try:
            found = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(str(requirement))
            continue
        if not requirement.specifier.contains(found, prereleases=True):
            problems.append(f"{requirement} (found {found})")
    return problems


def check() -> None:
    problems = unmet()
    if problems:
        quoted = " ".join(f"'{p.split(' (found')[0]}'" for p in problems)
        raise FaShimError(
            f"fa-shim's build requirements are missing from {sys.executable}'s environment: "
            + ", ".join(problems)
            + " (with --no-build-isolation nothing installs them).",
            fix=f"{sys.executable} -m pip install {quoted}",
        )
