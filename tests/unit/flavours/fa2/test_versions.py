"""Every supported upstream release is pinned: the registry lists exactly them, each by the
sha256 of its file on PyPI. Their patches on the real sdists: tests/integration/
test_patches_apply.py; each prepared for real under the CUDA torches (the pinned sdist, the
vendored patches, fa-shim's injected flags and the build.ninja torch writes):
tests/e2e/test_versions_prepare.py. See docs/upstream-versions.md.
"""

from __future__ import annotations

import re

import pytest
from conftest import SUPPORTED

from fa_backend.flavours.fa2 import _releases

# ----------------------------------------------------------------------------- the pins


def test_supported_versions_are_exactly_the_pinned_ones():
    assert _releases.known() == SUPPORTED


@pytest.mark.parametrize("version", SUPPORTED)
def test_pin_is_a_sha256_naming_the_upstream_file(version):
    release = _releases.release(version)
    assert re.fullmatch(r"[0-9a-f]{64}", release.sha256)
    assert release.sdist == f"flash_attn-{version}.tar.gz"
