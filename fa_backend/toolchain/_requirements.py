"""Under --no-build-isolation nobody installs [build-system] requires: check them ourselves, so
a missing one is one readable error instead of an ImportError deep in a child process.

The fix must not break what is installed (`pip install 'setuptools>=70'` takes one torch 2.11
refuses), so each of its requirements carries the specifiers installed distributions put on it.
"""

from __future__ import annotations

import importlib.metadata
import sys

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from ..core._errors import FaShimError
from ..core._toml import tomllib
from ..resources import PYPROJECT


def requirements() -> list[Requirement]:
    """fa-shim's build requirements that apply to this interpreter."""
    requires = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["build-system"]["requires"]
    return [r for r in map(Requirement, requires) if not r.marker or r.marker.evaluate()]


def _unmet() -> list[tuple[Requirement, str | None]]:
    """(requirement, the version found or None) for each one this environment does not meet."""
    problems: list[tuple[Requirement, str | None]] = []
    for requirement in requirements():
        try:
            found = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            problems.append((requirement, None))
            continue
        if not requirement.specifier.contains(found, prereleases=True):
            problems.append((requirement, found))
    return problems


def unmet() -> list[str]:
    """What the build would refuse to start without (the doctor asks the same function)."""
    return [f"{r} (found {found})" if found else str(r) for r, found in _unmet()]


def installed_constraints(name: str) -> list[tuple[str, SpecifierSet]]:
    """(who, specifier) for every distribution installed here that constrains `name`'s version,
    e.g. ("torch 2.11.0", <82) for setuptools (a torch-python's torch lives elsewhere)."""
    wanted = canonicalize_name(name)
    found, seen = [], set()
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"] or "")
        if name in seen:  # shadowed by one earlier on sys.path: not the installed one
            continue
        seen.add(name)
        who = f"{dist.metadata['Name']} {dist.version}"
        for text in dist.requires or []:
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if canonicalize_name(requirement.name) != wanted or not requirement.specifier:
                continue
            if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
                continue
            found.append((who, requirement.specifier))
    return sorted(found, key=lambda c: (not c[0].lower().startswith("torch "), c[0]))


def check() -> None:
    pairs = _unmet()
    if not pairs:
        return
    # to install: fa-shim's specifier intersected with the installed distributions' ones
    quoted, respected = [], []
    for requirement, _ in pairs:
        specifier = SpecifierSet(str(requirement.specifier))
        for who, other in installed_constraints(requirement.name):
            specifier &= other
            respected.append(f"{requirement.name}{other} from {who}")
        quoted.append(f"'{requirement.name}{specifier}'")
    raise FaShimError(
        f"fa-shim's build requirements are missing from {sys.executable}'s environment: "
        f"{', '.join(unmet())} (with --no-build-isolation nothing installs them).",
        fix=f"{sys.executable} -m pip install {' '.join(quoted)}"
        + (f" (keeps {', '.join(respected)})" if respected else ""),
    )
