"""Disk space on the real 2.8.3 sdist, built under the CUDA 13.0 torch 2.11 venv (the session's)
on a real small filesystem (a tmpfs in a private mount namespace): a build that cannot fit stops
before it extracts anything. The sample's full disks: tests/integration/test_full_disk.py."""

from __future__ import annotations

import pytest
from conftest import CAN_MOUNT, SHARED_SDISTS, assert_one_error_nothing_left, hook, on_small_disk

pytestmark = pytest.mark.skipif(
    not CAN_MOUNT, reason="needs root and a mount namespace (unshare -m) for a real small disk"
)


@pytest.mark.slow
def test_a_build_that_cannot_fit_stops_before_extracting(torch211_python, tmp_path):
    out = tmp_path / "out"
    python = torch211_python
    config = {"sdist-dir": str(SHARED_SDISTS), "cuda-archs": "90", "wheel-cache": "false"}
    proc = on_small_disk(tmp_path, [python, *hook("build_wheel", out, config)[1:]], "size=20m")
    text = assert_one_error_nothing_left(proc, out)
    assert "the build needs " in text and f"GB on {tmp_path / 'disk'}" in text
    assert ", has 20.9 MB (scratch" in text or ", has 21.0 MB (scratch" in text
    assert "running upstream setup.py" not in text  # stopped before any work
