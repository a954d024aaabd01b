"""Disk space, on real small filesystems (a tmpfs in a private mount namespace): a full disk is
named as such, never blamed on the archive, and a build that cannot fit stops before it starts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, SAMPLE_VERSION
from test_failures import CAN_MOUNT, hook

from fa_backend.flavours.fa2 import _sdist

pytestmark = pytest.mark.skipif(
    not CAN_MOUNT, reason="needs root and a mount namespace (unshare -m) for a real small disk"
)
TORCH211 = os.environ.get("TEST_REUSE_VENV_TORCH211")


def on_small_disk(
    tmp_path: Path, command: list, options: str, **env
) -> subprocess.CompletedProcess:
    """Run command with TMPDIR (the build's scratch) on a tmpfs mounted with `options`."""
    disk = tmp_path / "disk"
    disk.mkdir(exist_ok=True)
    mount = f'mount -t tmpfs -o {options} tmpfs {disk} && exec "$@"'
    environ = {**os.environ, "TMPDIR": str(disk), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", mount, "sh", *map(str, command)],
        cwd=REPO,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=900,
    )


def sample(sdists: Path) -> dict:
    return {
        "flash-attn-version": SAMPLE_VERSION,
        "allow-unknown-version": "true",
        "sdist-dir": str(sdists),
    }


def assert_one_error_nothing_left(proc, out: Path) -> str:
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in text, text
    assert text.count("fa-shim: error:") == 1, text
    assert not out.exists() or not list(out.iterdir())
    return text


def test_extracting_onto_a_full_disk_names_the_disk_not_the_archive(tmp_path, sample_sdist_dir):
    """Enough bytes, too few inodes: the space check passes, extraction hits a real ENOSPC."""
    sdist = sample_sdist_dir / f"flash_attn-{SAMPLE_VERSION}.tar.gz"
    digest = _sdist.sha256_of(sdist)
    out = tmp_path / "out"
    proc = on_small_disk(
        tmp_path, hook("build_wheel", out, sample(sample_sdist_dir)), "size=20m,nr_inodes=5"
    )
    text = assert_one_error_nothing_left(proc, out)
    assert f"no space left on {tmp_path / 'disk'}" in text
    assert "while extracting the sdist" in text
    assert "corrupt" not in text and "delete" not in text
    assert _sdist.sha256_of(sdist) == digest  # the verified file is untouched


def test_a_compile_that_fills_the_disk_is_no_space_not_a_compiler_error(tmp_path, sample_sdist_dir):
    out = tmp_path / "out"
    proc = on_small_disk(tmp_path, hook("build_wheel", out, sample(sample_sdist_dir)), "size=256k")
    text = assert_one_error_nothing_left(proc, out)
    assert f"no space left on {tmp_path / 'disk'}" in text and "while compiling" in text
    assert "the upstream build failed" not in text


@pytest.mark.slow
@pytest.mark.skipif(not TORCH211, reason="needs TEST_REUSE_VENV_TORCH211 (a CUDA torch)")
@pytest.mark.skipif(not Path("/work/shared/sdists").is_dir(), reason="needs the 2.8.3 sdist")
def test_a_build_that_cannot_fit_stops_before_extracting(tmp_path):
    out = tmp_path / "out"
    python = Path(TORCH211) / "bin" / "python"
    config = {"sdist-dir": "/work/shared/sdists", "cuda-archs": "90", "wheel-cache": "false"}
    proc = on_small_disk(tmp_path, [python, *hook("build_wheel", out, config)[1:]], "size=20m")
    text = assert_one_error_nothing_left(proc, out)
    assert "the build needs " in text and f"GB on {tmp_path / 'disk'}" in text
    assert ", has 20.9 MB (scratch" in text or ", has 21.0 MB (scratch" in text
    assert "running upstream setup.py" not in text  # stopped before any work
