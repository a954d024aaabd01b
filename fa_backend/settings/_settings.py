"""Loading the settings: one validated Settings from -C > FA_SHIM_* env > [tool.fa-shim], each
unknown key refused with a did-you-mean."""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core._errors import FaShimError
from . import _places
from ._convert import convert
from ._model import (
    ENV_PREFIX,
    FIELDS,
    ConfigSettings,
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
    "Settings",
    "default_cache_dir",
    "env_name",
    "load",
    "read_pyproject_table",
    "reference_markdown",
]

# settings that mean something to one flavour only: given to the other, they are refused
ONLY_FOR = {
    "fa2": ("sdist", "sdist-dir", "allow-unknown-version", "tu-parts"),
    "fa3": ("fa3-source", "fa3-hopper", "fa3-cutlass", "fa3-source-dir"),
}


def _did_you_mean(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def _unknown(key: str, where: str, known: list[str]) -> FaShimError:
    return FaShimError(
        f"unknown setting {key!r} in {where}.{_did_you_mean(key, known)}",
        fix="use one of: " + ", ".join(known) + " (README, 'Settings').",
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
# the environment). fa2 is the root project; fa3 is flash-attn-3/ (docs/fa3-design.md).
FLAVOUR_KEY = "flavour"
FLAVOURS = ("fa2", "fa3")


def _check_flavour(flavour: Any, pyproject: Path) -> str:
    if flavour not in FLAVOURS:
        raise FaShimError(
            f"{FLAVOUR_KEY} = {flavour!r} in [tool.fa-shim] of {pyproject} is not one of "
            f"{', '.join(FLAVOURS)}.{_did_you_mean(str(flavour), list(FLAVOURS))}",
            fix=f"correct {pyproject} (fa2: flash-attn, fa3: flash-attn-3).",
        )
    return flavour


def _check_applies(flavour: str, given: dict[str, str]) -> None:
    """A setting of the other flavour is a mistake, not something to ignore silently."""
    for other, keys in ONLY_FOR.items():
        for key in keys:
            if other != flavour and key in given:
                project = "flash-attn-3/ (flavour fa3)" if other == "fa3" else "fa-shim's root"
                raise FaShimError(
                    f"setting {key!r} (from {given[key]}) applies to {project} only, and this "
                    f"project builds {'flash-attn-3' if flavour == 'fa3' else 'flash-attn'}.",
                    fix=f"drop {key}, or build the other project.",
                )


def load(
    config_settings: ConfigSettings | None,
    environ: Mapping[str, str] | None = None,
    project_dir: Path | None = None,
) -> Settings:
    """Merge the three sources, highest first: config_settings, environment, [tool.fa-shim]."""
    environ = os.environ if environ is None else environ
    known = list(FIELDS)
    layers: list[tuple[str, dict[str, Any]]] = []

    # the file's full path in every message: a frontend may build from a copy of the project
    pyproject = (project_dir or Path.cwd()).absolute() / "pyproject.toml"
    table = dict(read_pyproject_table(pyproject.parent))
    flavour = _check_flavour(table.pop(FLAVOUR_KEY, "fa2"), pyproject)
    for key in table:
        if key not in FIELDS:
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
        if norm not in FIELDS:
            raise _unknown(key, "config_settings (-C)", known)
        cs_layer[norm] = value
    layers.append(("config_settings (-C)", cs_layer))

    _check_applies(
        flavour,
        {
            k: (where if layer is not env_layer else env_name(k))
            for where, layer in layers
            for k in layer
        },
    )
    values: dict[str, Any] = {"flavour": flavour}
    for where, layer in layers:  # later layers win
        for key, value in layer.items():
            field = FIELDS[key]
            # name the real source, so the fix says what to change: FA_SHIM_MAX_JOBS
            source = f"environment variable {env_name(key)}" if layer is env_layer else where
            kind, maximum = field.metadata["kind"], field.metadata.get("max")
            values[field.name] = convert(key, kind, value, source, maximum)
    if values.get("sdist_dir") and not values["sdist_dir"].is_dir():
        raise FaShimError(
            f"the sdist-dir {values['sdist_dir']} does not exist (or is not a directory).",
            fix="create it with the flash-attn sdists in it, or correct the sdist-dir setting "
            "(without it the sdist is downloaded from the package index).",
        )
    if values.get("fa3_source_dir") and not values["fa3_source_dir"].is_dir():
        raise FaShimError(
            f"the fa3-source-dir {values['fa3_source_dir']} does not exist (or is not a "
            "directory).",
            fix="create it with the two FlashAttention-3 tarballs in it, or correct the "
            "fa3-source-dir setting.",
        )
    settings = Settings(**values)
    _places.name(settings)
    return settings
