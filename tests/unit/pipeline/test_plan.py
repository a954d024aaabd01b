"""The plan's metadata (fa_backend/pipeline/_plan.py), on a real plan (the FA2 flavour's of the
sample sdist): the prepared metadata written whole and the wheel held to it. The metadata hook
loading none of the compile pipeline: tests/integration/test_hooks.py."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import fa2_plan

from fa_backend.core._errors import FaShimError
from fa_backend.pipeline import _plan


@pytest.fixture
def plan(sample_sdist_dir):
    return fa2_plan(sample_sdist_dir)


def test_the_prepared_metadata_is_the_plans_in_its_dist_info(plan, tmp_path):
    assert _plan.write_metadata(plan, str(tmp_path)) == plan.dist_info
    assert (tmp_path / plan.dist_info / "METADATA").read_text() == plan.metadata
    assert [p.name for p in tmp_path.rglob("*")] == [plan.dist_info, "METADATA"]  # no .part


@pytest.mark.parametrize("layout", ["dist-info", "flat"])
def test_a_wheel_carrying_the_prepared_metadata_passes(plan, tmp_path, layout):
    """pip hands the metadata directory back as it got it, or the dist-info itself."""
    _plan.write_metadata(plan, str(tmp_path))
    given = tmp_path if layout == "dist-info" else tmp_path / plan.dist_info
    _plan.check_prepared_metadata(plan, str(given))


def test_metadata_that_changed_since_it_was_prepared_fails_with_the_difference(plan, tmp_path):
    _plan.write_metadata(plan, str(tmp_path))
    other = dataclasses.replace(plan, metadata=plan.metadata.replace("0.1.0+", "0.1.0.post1+"))
    with pytest.raises(FaShimError) as info:
        _plan.check_prepared_metadata(other, str(tmp_path))
    assert "the metadata prepared earlier differs from what this build would produce" in (
        info.value.cause
    )
    details = info.value.details
    assert "-Version: 0.1.0+" in details and "+Version: 0.1.0.post1+" in details
    assert info.value.fix == "run the install again so both steps see the same torch."


def test_no_prepared_metadata_at_all_is_a_difference(plan, tmp_path):
    with pytest.raises(FaShimError, match="the metadata prepared earlier differs"):
        _plan.check_prepared_metadata(plan, str(tmp_path / "nothing"))
