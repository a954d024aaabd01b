"""The PEP 517 hooks. Each one is a line or two; the work lives in pipeline/_plan and
fleet/_cached (the caches around pipeline/_build), imported only when needed: a metadata or
sdist hook loads none of the compile pipeline. A wheel-cache hit is found while preparing the
metadata, and build_wheel hands it on (fleet/_handoff) without planning again."""

from __future__ import annotations

from pathlib import Path

from .core._errors import FaShimError
from .core._failures import boundary


@boundary
def get_requires_for_build_wheel(config_settings=None):
    return []  # everything is in [build-system] requires; torch is found, never installed


@boundary
def get_requires_for_build_sdist(config_settings=None):
    return []


@boundary
def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    from .toolchain import _torch

    _torch.locate_early()  # torch's locate child runs while the plan's modules load
    from .fleet import _cached
    from .pipeline import api as pipeline

    return _cached.prepare(pipeline.plan(config_settings), metadata_directory)


@boundary
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    from .fleet import _handoff

    handed_on = _handoff.take(metadata_directory, wheel_directory)
    if handed_on:  # prepare_metadata served it from the wheel cache
        return handed_on
    from .toolchain import _torch

    _torch.locate_early()
    from .fleet import _cached
    from .pipeline import api as pipeline

    return _cached.build(pipeline.plan(config_settings), wheel_directory, metadata_directory)


@boundary
def build_sdist(sdist_directory, config_settings=None):
    from .flavours import _registry
    from .wheel import _sdist_self

    flavour, settings = _registry.load(config_settings)
    return _sdist_self.write(
        Path.cwd(), sdist_directory, flavour.names, flavour.sdist_contents(settings)
    )


@boundary
def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    raise FaShimError(
        "editable installs are not supported: fa-shim builds a compiled flash-attn wheel from "
        "the upstream sdist, there is nothing to edit in place.",
        fix="install without -e: `pip install --no-build-isolation ./fa-shim`.",
    )
