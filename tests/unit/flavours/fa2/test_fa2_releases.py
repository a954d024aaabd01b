"""The registry of upstream releases (fa_backend/flavours/fa2/_releases.py) as this checkout has
it: every release is well formed. A
release added by its directory alone, and malformed ones, through real processes:
tests/integration/test_releases.py."""

from __future__ import annotations

from conftest import REPO

from fa_backend.flavours.fa2 import _releases


def test_every_release_of_this_checkout_is_well_formed():
    for version in _releases.known():
        release = _releases.release(version)
        assert release.pinned and release.sdist == f"flash_attn-{version}.tar.gz"


def test_every_shared_patch_file_is_listed_by_a_release():
    """One file per distinct patch: none left that no release applies (FA3's: test_fa3_releases)."""
    releases = [_releases.release(v) for v in _releases.known()]
    listed = {p for r in releases for p in r.patches + (r.stable.patches if r.stable else ())}
    assert listed == set((REPO / "vendored_patches" / "patches").glob("*"))
