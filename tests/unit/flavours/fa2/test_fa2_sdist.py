"""Which release a given sdist builds (fa_backend/flavours/fa2/_sdist.py): `-C sdist=FILE` of a
known release builds that release, its sha256 (vendored_patches/<version>/release.toml) saying
which, over the checkout's default; given `flash-attn-version` too, a mismatch stays an error.
In-process, on the pinned upstream sdists."""

from __future__ import annotations

import pytest
from conftest import SHARED_SDISTS, planned

from fa_backend.core._errors import FaShimError
from fa_backend.flavours.fa2._flavour import FLAVOUR

OLD = SHARED_SDISTS / "flash_attn-2.8.3.tar.gz"  # a config written before 0.5.0 names this file


def test_a_given_sdist_of_a_known_release_builds_that_release():
    plan = planned(FLAVOUR, {"sdist": str(OLD)})  # the default (pyproject.toml) is 2.8.3.post2
    assert plan.source.sdist.version == "2.8.3" and plan.source.sdist.pinned
    assert plan.settings.flash_attn_version == "2.8.3"
    assert plan.version.startswith("2.8.3+")
    assert [p.name for p in plan.patches] == [p.name for p in _patches("2.8.3")]


def test_the_default_releases_own_sdist_builds_the_default():
    plan = planned(FLAVOUR, {"sdist": str(SHARED_SDISTS / "flash_attn-2.8.3.post2.tar.gz")})
    assert plan.source.sdist.version == "2.8.3.post2"


def test_a_version_given_too_must_match_the_sdist():
    config = {"sdist": str(OLD), "flash-attn-version": "2.8.3.post2"}
    with pytest.raises(FaShimError) as info:
        planned(FLAVOUR, config)
    assert info.value.cause == "flash_attn-2.8.3.tar.gz is not the flash-attn 2.8.3.post2 sdist."
    plan = planned(FLAVOUR, {**config, "flash-attn-version": "2.8.3"})
    assert plan.source.sdist.version == "2.8.3"


def _patches(version: str):
    from fa_backend.flavours.fa2 import _releases

    return _releases.patches(version)
