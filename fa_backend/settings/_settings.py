"""Loading the settings: one validated Settings from -C > FA_SHIM_* env > [tool.fa-shim], each
unknown key refused with a did-you-mean."""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core import _failures
from ..core._errors import FaShimError
from ._convert import convert
from ._model import (
    ENV_PREFIX,
    FIELDS,
    ConfigSettings,
    Setting,
    Settings,
    default_cache_dir,
    env_name,
    reference_markdown,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.9/3.10 only
    import tomli as tomllib

__all__ = [
    "ENV_PREFIX",
    "FIELDS",
    "ConfigSettings",
    "Setting",
    "Settings",
    "default_cache_dir",
    "env_name",
    "load",
    "pyproject_of",
    "read_pyproject_table",
    "reference_markdown",
]


def _unknown(key: str, where: str, known: list[str]) -> FaShimError:
    close = difflib.get_close_matches(key, known, n=1)
    return FaShimError(
        f"unknown setting {key!r} in {where}.{f' Did you mean {close[0]!r}?' if close else ''}",
        fix="use one of: " + ", ".join(known) + " (docs/reference/settings.md).",
    )


def read_pyproject_table(project_dir: Path) -> dict[str, Any]:
    path = project_dir / "pyproject.toml"
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise FaShimError(f"{path} is not valid TOML: {exc}", fix=f"correct {path}.") from None
    return data.get("tool", {}).get("fa-shim", {})


# What a project directory builds: a fact of its pyproject.toml ([tool.fa-shim] only, never -C or
# the environment), checked against the known flavours by flavours/_registry.
FLAVOUR_KEY = "flavour"


def pyproject_of(project_dir: Path | None) -> Path:
    """The project's pyproject.toml by its full path, as every message names it: a frontend may
    build from a copy of the project."""
    return (project_dir or Path.cwd()).absolute() / "pyproject.toml"


CONFIG_SETTINGS = "config_settings (-C)"


def given_to_the_build(settings: Settings, key: str) -> bool:
    """Whether key was given to this build (-C or FA_SHIM_*), not by [tool.fa-shim]'s default."""
    return settings.given.get(key) in (CONFIG_SETTINGS, env_name(key))


def load(
    config_settings: ConfigSettings | None,
    environ: Mapping[str, str] | None = None,
    project_dir: Path | None = None,
    declared: Sequence[Setting] = (),
) -> Settings:
    """Merge the three sources, highest first: config_settings, environment, [tool.fa-shim].
    The settings known are the shared ones and those declared (every flavour's own)."""
    environ = os.environ if environ is None else environ
    fields = {**FIELDS, **{s.key: s for s in declared}}
    known = list(fields)
    layers: list[tuple[str, dict[str, Any]]] = []

    pyproject = pyproject_of(project_dir)
    table = dict(read_pyproject_table(pyproject.parent))
    flavour = table.pop(FLAVOUR_KEY, Settings.flavour)  # checked by flavours/_registry
    for key in table:
        if key not in fields:
            raise _unknown(key, f"[tool.fa-shim] of {pyproject}", [*known, FLAVOUR_KEY])
    layers.append((f"[tool.fa-shim] of {pyproject}", table))

    env_layer = {}
    known_env = {env_name(k): k for k in known}
    for name, value in environ.items():
        if name.startswith(ENV_PREFIX):
            if name not in known_env:
                raise _unknown(name, "the environment", list(known_env))
            env_layer[known_env[name]] = value
    layers.append(("the environment", env_layer))

    cs_layer = {}
    for key, value in (config_settings or {}).items():
        norm = key.lstrip("-").replace("_", "-")
        if norm not in fields:
            raise _unknown(key, CONFIG_SETTINGS, known)
        cs_layer[norm] = value
    layers.append((CONFIG_SETTINGS, cs_layer))

    values: dict[str, Any] = {s.key: s.default for s in declared}
    given: dict[str, str] = {}  # key: where it came from (a flavour refuses another's keys)
    for where, layer in layers:  # later layers win
        for key, value in layer.items():
            setting = fields[key]
            # name the real source, so the fix says what to change: FA_SHIM_MAX_JOBS
            source = f"environment variable {env_name(key)}" if layer is env_layer else where
            values[key] = convert(key, setting.kind, value, source, setting.maximum)
            given[key] = env_name(key) if layer is env_layer else where
    for key, setting in fields.items():
        path = values.get(key)
        if setting.missing and path and not path.is_dir():
            raise FaShimError(
                f"the {key} {path} does not exist (or is not a directory).", fix=setting.missing
            )
    own = {s.key: values.pop(s.key) for s in declared}
    shared = {key.replace("-", "_"): value for key, value in values.items()}
    settings = Settings(**shared, flavour=flavour, given=given, own=own)
    _name_places(settings, [s.key for s in fields.values() if s.missing])
    return settings


_FIX = {
    "wheel-cache-dir": "make it writable for this user, name another wheel cache with "
    "-C wheel-cache-dir=DIR, or turn it off with -C wheel-cache=false.",
    "cache-dir": "make it writable for this user, or name another with -C cache-dir=DIR.",
}
_CACHES = ("cache-dir", "wheel-cache-dir")


def _name_places(settings: Settings, existing: Sequence[str]) -> None:
    """The directories settings name, told to the error messages (core/_failures.name_place): a
    full or unwritable disk under /tmp is then "setting wheel-cache-dir", not "TMPDIR", and its
    fix names the setting that moves it. The caches, and the directories given that must exist
    (`existing`: their keys), are checked to be directories."""
    for key in (*existing, *_CACHES):
        path = getattr(settings, key.replace("-", "_"))
        if path is None:
            continue
        if path.exists() and not path.is_dir():
            raise FaShimError(
                f"the {key} {path} is a file, not a directory.",
                fix=f"point {key} at a directory (fa-shim makes a missing one).",
            )
        _failures.name_place(path, f"setting {key}", _FIX.get(key))
