"""The release registries' files: each flavour keeps what it knows of an upstream release in a
`release.toml` under vendored_patches/, beside the patches applied to it."""

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
