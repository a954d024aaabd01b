"""The pipeline's steps that run in-process (fa_backend/pipeline/_plan.py), on a real plan (the
FA2 flavour's of the sample sdist): the build's scratch directory (the prepared metadata:
test_plan.py). The steps that probe torch, nvcc and the compilers, and
run upstream's setup.py: the integration tier (tests/integration/test_hooks.py,
test_sample_install.py and the others that build the sample)."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import fa2_plan

from fa_backend.pipeline import _plan


@pytest.fixture
def plan(sample_sdist_dir):
    return fa2_plan(sample_sdist_dir)


@pytest.mark.parametrize("keep", [False, True])
def test_the_scratch_directory_goes_unless_kept(plan, keep, capsys):
    settings = dataclasses.replace(plan.settings, keep_build_dir=keep)
    with _plan.scratch_dir(settings) as scratch:
        assert scratch.parent == Path(tempfile.gettempdir())
        assert scratch.name.startswith("fa-shim-build-")
        (scratch / "src").mkdir()
    assert scratch.exists() == keep
    assert (f"kept the build directory {scratch}" in capsys.readouterr().err) == keep
    if keep:
        shutil.rmtree(scratch)
