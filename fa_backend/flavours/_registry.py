"""Which flavours exist and which one a project builds: fa2 and fa3, and any a package adds
through the `fa_shim.flavours` entry point group (name: the flavour's; value: its Flavour). Each
flavour's own settings reach the settings model from here; one given to another's build is refused.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Mapping
from pathlib import Path

from ..core._errors import FaShimError, UnknownSetting
from ..settings import _settings
from ._interface import Flavour
from ._vocabulary import did_you_mean

ENTRY_POINTS = "fa_shim.flavours"
BUILT_IN = {"fa2": "fa_backend.flavours.fa2", "fa3": "fa_backend.flavours.fa3"}


@functools.cache  # one scan of the environment's distributions per process (~40 ms in a large one)
def _plugins() -> dict:
    from importlib import metadata  # a build of a built-in flavour imports it not at all

    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINTS)}


def known() -> list[str]:
    return [*BUILT_IN, *sorted(set(_plugins()) - set(BUILT_IN))]


def _unknown(name: str, pyproject: str) -> FaShimError:
    return FaShimError(
        f"{_settings.FLAVOUR_KEY} = {name!r} in [tool.fa-shim] of {pyproject} is not one "
        f"of {', '.join(known())}." + did_you_mean(str(name), known(), cutoff=0.6),
        fix=f"correct {pyproject} (fa2: flash-attn, fa3: flash-attn-3), or install the "
        f"package that provides flavour {name!r}.",
    )


@functools.cache
def get(name: str) -> Flavour:
    """The flavour called name, or one error naming the known ones."""
    if name in BUILT_IN:
        return importlib.import_module(BUILT_IN[name] + "._flavour").FLAVOUR
    plugin = _plugins().get(name)
    if plugin is None:
        raise _unknown(name, "pyproject.toml")
    flavour = plugin.load()
    if not isinstance(flavour, Flavour):
        raise FaShimError(
            f"the entry point {plugin.value} of flavour {name!r} is not a fa-shim Flavour.",
            fix=f"its {ENTRY_POINTS} entry point must name a Flavour instance.",
        )
    return flavour


def every() -> list[Flavour]:
    return [get(name) for name in known()]


def of_dist(dist: str) -> Flavour | None:
    """The flavour that builds the distribution called dist (any spelling of its name)."""
    wanted = dist.lower().replace("_", "-")
    return next((f for f in every() if f.names.dist == wanted), None)


def of_package(top_levels: set[str]) -> Flavour | None:
    """The flavour of a wheel or site-packages entry by the packages it holds: the most
    specific package first (an FA3 wheel holds flash_attn_3, no flash_attn)."""
    for flavour in sorted(every(), key=lambda f: -len(f.names.package)):
        if flavour.names.package in top_levels:
            return flavour
    return None


def of_project(project_dir: Path) -> Flavour | None:
    """The flavour a project's pyproject.toml names, its settings unread (None: the file is
    unreadable or names no flavour known here)."""
    try:
        name = _settings.read_pyproject_table(project_dir).get(_settings.FLAVOUR_KEY)
    except FaShimError:
        return None
    name = name or _settings.Settings.flavour
    return get(name) if name in known() else None


def own_settings(name: str) -> tuple[_settings.Setting, ...]:
    """A flavour's own settings; a built-in's from its light _settings module, so a build
    imports no other flavour's code (a hit's hooks: bench/results/2026-12-02-h200-hit-cost)."""
    if name in BUILT_IN:
        return importlib.import_module(BUILT_IN[name] + "._settings").OWN
    return get(name).own_settings


def declared(plugins: bool = True) -> list[_settings.Setting]:
    """Every flavour's own settings (the built-ins' alone: `plugins` false), each key declared
    by one flavour only."""
    owner: dict[str, str] = {}
    names = known() if plugins else list(BUILT_IN)
    for name in names:
        for setting in own_settings(name):
            if setting.key in _settings.FIELDS or setting.key in owner:
                other = owner.get(setting.key)
                raise FaShimError(
                    f"flavour {name!r} declares setting {setting.key!r}, "
                    + (f"as {other!r} does." if other else "a shared setting."),
                    fix=f"rename the setting in flavour {name!r}.",
                )
            owner[setting.key] = name
    return [s for name in names for s in own_settings(name)]


def load_settings(
    config_settings: _settings.ConfigSettings | None,
    environ: Mapping[str, str] | None = None,
    project_dir: Path | None = None,
) -> _settings.Settings:
    """The settings, every flavour's own among them; whether they apply: load(). The plug-ins
    are scanned (every distribution's entry points, 33 ms in each hook on the H200:
    bench/results/2026-12-02-h200-hit-after-seam) only where the built-ins' settings do not
    read every one given, or the project names another flavour."""
    with contextlib.suppress(UnknownSetting):
        settings = _settings.load(config_settings, environ, project_dir, declared(plugins=False))
        if settings.flavour in BUILT_IN:
            return settings
    return _settings.load(config_settings, environ, project_dir, declared())


def defaults() -> _settings.Settings:
    """The settings when none are given and none can be read (doctor, after a bad one)."""
    return _settings.Settings(own={s.key: s.default for s in declared()})


def load(
    config_settings: _settings.ConfigSettings | None,
    environ: Mapping[str, str] | None = None,
    project_dir: Path | None = None,
) -> tuple[Flavour, _settings.Settings]:
    """The project's flavour and its settings, each setting checked to apply to it."""
    settings = load_settings(config_settings, environ, project_dir)
    # an unknown name by the file's full path: a frontend builds a copy
    if settings.flavour not in BUILT_IN and settings.flavour not in known():
        raise _unknown(settings.flavour, str(_settings.pyproject_of(project_dir)))
    flavour = get(settings.flavour)
    # a setting of another flavour is a mistake, not something to ignore silently
    built_in = {s.key for name in BUILT_IN for s in own_settings(name)} | set(_settings.FIELDS)
    for name in list(BUILT_IN) if set(settings.given) <= built_in else known():
        if name == flavour.names.flavour:
            continue
        for key in sorted(s.key for s in own_settings(name)):
            if key in settings.given:
                other = get(name)
                raise FaShimError(
                    f"setting {key!r} (from {settings.given[key]}) applies to "
                    f"{other.names.project_label} only, and this project builds "
                    f"{flavour.names.dist}.",
                    fix=f"drop {key}, or build the other project.",
                )
    return flavour, settings
