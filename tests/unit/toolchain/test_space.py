"""Disk space before a build (fa_backend/toolchain/_space.py), in-process on real directories:
what a build of a kernel set needs (from the recorded builds), what an sdist extracts to, and
the one error when a filesystem has less than the needs on it together. Full disks for real
(tmpfs in a mount namespace): tests/integration/test_full_disk.py and
tests/e2e/test_space_real_sdist.py."""

from __future__ import annotations

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.toolchain import _space

EXABYTE = 1000**6


def test_a_kernel_sets_needs_grow_with_kernels_and_architectures():
    scratch, wheel = _space.compile_needs(4, 1, 10_000_000)
    per_unit = _space.SCRATCH_PER_KERNEL_ARCH
    assert scratch == int((_space.SCRATCH_BASE + 4 * per_unit) * _space.MARGIN)
    assert wheel == int(4 * _space.WHEEL_PER_KERNEL_ARCH * _space.MARGIN)
    full = _space.compile_needs(_space.FULL_KERNELS, 2, 10_000_000)
    assert full[0] > 10 * scratch and full[1] == int(144 * _space.MB * _space.MARGIN)


def test_a_package_without_kernel_sets_is_sized_from_its_sdist():
    assert _space.compile_needs(None, 4, 1_000_000) == (int(20e6 * _space.MARGIN), 4_000_000)


def test_what_an_sdist_extracts_to_is_checked_against_the_disk(tmp_path):
    """The size comes from the members' headers (sources/_archives.extract), with the margin."""
    _space.before_extract(tmp_path, 1000)
    with pytest.raises(FaShimError) as info:
        _space.before_extract(tmp_path, EXABYTE)
    assert "(extracting the sdist 1250000000.0 GB)." in info.value.cause


def test_needs_that_fit_pass(tmp_path):
    _space.require([("scratch", tmp_path, 1), ("the wheel", tmp_path / "not" / "yet", 1)])


def test_needs_on_one_filesystem_add_up_in_one_error(tmp_path):
    with pytest.raises(FaShimError) as info:
        _space.require([("scratch", tmp_path, EXABYTE), ("the wheel", tmp_path / "out", 5000)])
    cause = info.value.cause
    assert cause.startswith("not enough disk space: the build needs 1000000000.0 GB on ")
    assert "(scratch 1000000000.0 GB, the wheel 5 kB)." in cause
    assert info.value.fix == (
        "free space there, or point that directory at a larger disk; nothing was extracted or "
        "compiled yet."
    )
