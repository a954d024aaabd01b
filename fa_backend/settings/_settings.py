"""Loading the settings: one validated Settings from -C > FA_SHIM_* env > [tool.fa-shim], each
unknown key refused with a did-you-mean, each value converted to its kind or refused with one
error naming the setting, where it came from and what was expected."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from ..core import _failures
from ..core._errors import FaShimError, UnknownSetting
from ..core._toml import tomllib
from ..resources.team_install import arch_name
from ._model import ENV_PREFIX, FIELDS, ConfigSettings, Setting, Settings, env_name

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _absolute(text: str) -> Path:
    """A relative path is relative to where the user ran the command: a frontend (pip) runs the
    backend elsewhere, but the shell's PWD survives it."""
    path = Path(os.path.expanduser(text))
    if path.is_absolute():
        return path
    pwd = os.environ.get("PWD")
    base = Path(pwd) if pwd and os.path.isabs(pwd) and os.path.isdir(pwd) else Path.cwd()
    return Path(os.path.normpath(base / path))


def convert(key: str, kind: str, value: Any, where: str, maximum: int | None = None) -> Any:
    variable = where.rsplit(" ", 1)[-1] if where.startswith("environment variable") else None

    def bad(expected: str) -> FaShimError:
        return FaShimError(
            f"setting {key!r} from {where} is {value!r}, expected {expected}.",
            fix=f"correct {variable}." if variable else f"correct {key} in {where}.",
        )

    # an empty value is refused for every kind, never read as "unset": most often it is an
    # unset shell variable (-C cuda-archs=$ARCH)
    if (value == [] or value == ()) or (
        not isinstance(value, (bool, list, tuple)) and not str(value).strip()
    ):
        raise FaShimError(
            f"setting {key!r} from {where} is empty: fa-shim refuses an empty value for every "
            "setting (an unset shell variable, most often).",
            fix=f"give it a value, or unset {variable} for the default."
            if variable
            else f"give {key} a value in {where}, or leave it out for the default.",
        )
    if kind in ("archs", "list"):
        items = value if isinstance(value, (list, tuple)) else re.split(r"[;,\s]+", str(value))
    if kind == "archs":
        # compute_XX names PTX for a virtual arch: flash-attn compiles real GPU code only
        archs = [arch_name(item) for item in (str(i).strip() for i in items) if item]
        if None in archs:  # install.py's --archs reads them alike
            raise bad("architectures like 80, 90, 9.0, 100a or 'sm_90'")
        return tuple(dict.fromkeys(archs))
    if kind == "list":
        return tuple(dict.fromkeys(str(i).strip().lower() for i in items if str(i).strip()))
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise bad("a single value")
        value = value[0]
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in _TRUE | _FALSE:
            raise bad("true or false")
        return text in _TRUE
    if kind in ("int", "seconds"):
        expected = "a positive integer" if kind == "int" else "a positive number of seconds"
        try:
            number = int(str(value)) if kind == "int" else float(str(value))
        except ValueError:
            raise bad(expected) from None
        if maximum is not None and not 1 <= number <= maximum:
            raise bad(f"an integer from 1 to {maximum}")
        if not number > 0:  # NaN too
            raise bad(expected)
        return number
    if kind == "path":
        return _absolute(str(value).strip())
    if kind == "str":
        return str(value).strip()
    if kind == "version":
        try:
            version = Version(str(value).strip())
        except InvalidVersion:
            raise bad("a PEP 440 version such as 2.8.3 or 2.8.3.post2") from None
        # v2.8.3, 2.8.3.0 and ' 2.8.3 ' are 2.8.3; zeros beyond major.minor.patch go
        release = list(version.release)
        while len(release) > 3 and release[-1] == 0:
            release.pop()
        full, short = ".".join(map(str, version.release)), ".".join(map(str, release))
        return str(version).replace(full, short, 1)
    raise AssertionError(kind)


def reference_markdown(declared: Sequence[Setting]) -> str:
    """The settings table of docs/reference/settings.md: the shared settings, then those the
    flavours declare."""
    rows = ["| `-C` key | environment variable | default | meaning |", "|---|---|---|---|"]
    for setting in [*FIELDS.values(), *declared]:
        key, default = setting.key, setting.default
        shown = "—" if default in (None, ()) else f"`{str(default).lower()}`"
        rows.append(f"| `{key}` | `{env_name(key)}` | {shown} | {setting.help} |")
    return "\n".join(rows)


def _unknown(key: str, where: str, known: list[str]) -> UnknownSetting:
    close = difflib.get_close_matches(key, known, n=1)
    return UnknownSetting(
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


# what a project builds: a fact of its [tool.fa-shim] alone, never -C or the environment
FLAVOUR_KEY = "flavour"


def pyproject_of(project_dir: Path | None) -> Path:
    """The project's pyproject.toml by its full path, as every message names it."""
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
    """Merge config_settings, the environment and [tool.fa-shim], highest first; the settings
    known are the shared ones and those declared (every flavour's own)."""
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


# the caches, each with the fix when it cannot be written
_CACHES = {
    "cache-dir": "make it writable for this user, or name another with -C cache-dir=DIR.",
    "wheel-cache-dir": "make it writable for this user, name another wheel cache with "
    "-C wheel-cache-dir=DIR, or turn it off with -C wheel-cache=false.",
}


def _name_places(settings: Settings, existing: Sequence[str]) -> None:
    """Tell the error messages the directories settings name (a full disk is then "setting
    wheel-cache-dir", not "TMPDIR"); the caches and `existing` must be directories."""
    for key in (*existing, *_CACHES):
        path = getattr(settings, key.replace("-", "_"))
        if path is None:
            continue
        if path.exists() and not path.is_dir():
            raise FaShimError(
                f"the {key} {path} is a file, not a directory.",
                fix=f"point {key} at a directory (fa-shim makes a missing one).",
            )
        _failures.name_place(path, f"setting {key}", _CACHES.get(key))
