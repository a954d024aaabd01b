"""Which release a given sdist builds (fa_backend/flavours/fa2/_sdist.py): `-C sdist=FILE` of a
known release builds that release, its sha256 (vendored_patches/<version>/release.toml) saying
which, over the checkout's default; given `flash-attn-version` too, a mismatch stays an error.
Refused, the fix names a file or setting that works (issue 54's SA08, N01). In-process, on the
pinned upstream sdists."""

from __future__ import annotations

import pytest
from conftest import SHARED_SDISTS, planned, torch_info

from fa_backend.core._errors import FaShimError
from fa_backend.flavours.fa2._flavour import FLAVOUR
from fa_backend.settings import _model

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


def test_sa08_a_given_sdist_without_a_stable_line_names_the_file_of_one():
    """-C sdist=<2.8.3> -C torch-abi=stable: the fix was -C flash-attn-version=2.8.3.post2,
    which the given file then refused; it names the 2.8.3.post2 file beside it."""
    torch = torch_info("2.11.0+cu130", "13.0")
    with pytest.raises(FaShimError) as info:
        planned(FLAVOUR, {"sdist": str(OLD), "torch-abi": "stable"}, torch=torch)
    assert info.value.cause.startswith(
        f"{OLD} (setting sdist) is flash-attn 2.8.3, which has no binding on torch's stable ABI"
    )
    post2 = SHARED_SDISTS / "flash_attn-2.8.3.post2.tar.gz"
    assert info.value.fix.startswith(f"build one of those (its sdist: -C sdist={post2}), or ")
    plan = planned(FLAVOUR, {"sdist": str(post2), "torch-abi": "stable"}, torch=torch)
    assert plan.source.sdist.version == "2.8.3.post2" and plan.stable_abi == "2.10.0"


def test_n01_a_damaged_sdist_in_the_cache_offline_names_the_offline_it_needs_off():
    """Offline, the fix "delete it and let fa-shim download it again" could not work as written."""
    cache = _model.default_cache_dir() / "sdists"  # this test's own (conftest)
    cache.mkdir(parents=True)
    damaged = cache / "flash_attn-2.8.3.post2.tar.gz"
    damaged.write_bytes((SHARED_SDISTS / damaged.name).read_bytes()[:100_000])
    for offline, tail in (("true", " (-C offline=false: offline forbids it)."), ("false", ".")):
        with pytest.raises(FaShimError) as info:
            planned(FLAVOUR, {"offline": offline})
        assert info.value.cause.startswith(f"sha256 mismatch for {damaged} (from fa-shim cache)")
        assert info.value.fix == f"delete {damaged} and let fa-shim download it again" + tail


def _patches(version: str):
    from fa_backend.flavours.fa2 import _releases

    return _releases.patches(version)
