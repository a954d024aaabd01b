"""Disk space, on real small filesystems (a tmpfs in a private mount namespace): a full disk is
named as such, never blamed on the archive. A build that cannot fit stops before it starts:
tests/e2e/test_space_real_sdist.py (the real sdist under a CUDA torch)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import (
    CAN_MOUNT,
    PY,
    SAMPLE_VERSION,
    assert_one_error_nothing_left,
    hook,
    on_small_disk,
    pack_bomb,
    sample_settings,
)

from fa_backend.flavours.fa2 import _sdist

pytestmark = pytest.mark.skipif(
    not CAN_MOUNT, reason="needs root and a mount namespace (unshare -m) for a real small disk"
)


def sample(sdists: Path) -> dict:
    return {
        "flash-attn-version": SAMPLE_VERSION,
        "allow-unknown-version": "true",
        "sdist-dir": str(sdists),
    }


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
    proc = on_small_disk(tmp_path, hook("build_wheel", out, sample(sample_sdist_dir)), "size=128k")
    text = assert_one_error_nothing_left(proc, out)
    assert f"no space left on {tmp_path / 'disk'}" in text and "while compiling" in text
    assert "the upstream build failed" not in text


def test_a_wheel_cache_hit_needs_only_the_wheels_space(tmp_path, sample_wheel):
    """A hit only copies a wheel: scratch (TMPDIR) on a disk far too small for the build does not
    stop it (the session's sample wheel is in its wheel cache); the build's needs are checked on
    a miss, before anything is extracted."""
    config = dict(s.split("=", 1) for s in sample_wheel["settings"][1::2])
    out = tmp_path / "out"
    proc = on_small_disk(tmp_path, hook("build_wheel", out, config), "size=16k")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "wheel cache hit" in proc.stderr, proc.stderr
    assert [w.name for w in out.iterdir()] == [sample_wheel["wheel"].name]
    config["wheel-cache-dir"] = str(tmp_path / "empty")  # a miss: the build's needs, refused
    text = assert_one_error_nothing_left(
        on_small_disk(tmp_path, hook("build_wheel", tmp_path / "out2", config), "size=16k"),
        tmp_path / "out2",
    )
    assert "not enough disk space" in text and "scratch" in text, text


def test_a_gzip_bomb_on_a_small_disk_is_refused_before_anything_is_written(tmp_path):
    """Issue 54's S13: 4 GiB of zeros in 18.8 MB, whose gzip trailer reads 16 kB (the size
    modulo 4 GiB), --build-dir and TMPDIR on a 200 MB disk: refused at the member's header, the
    disk left empty (its listing is taken inside the mount namespace). Roomy disk:
    test_hostile_inputs.py's gzip-bomb row."""
    bomb = pack_bomb(tmp_path / "bomb")
    listing = tmp_path / "left-on-disk"
    disk = tmp_path / "disk"
    prepare = [PY, "-m", "fa_backend", "prepare", "--build-dir", disk / "b"]
    script = '"$@"; status=$?; ls -A "$DISK" > "$LISTING"; exit $status'
    command = ["sh", "-c", script, "sh", *prepare, *sample_settings(bomb.parent)]
    proc = on_small_disk(tmp_path, command, "size=200m", DISK=str(disk), LISTING=str(listing))
    text = assert_one_error_nothing_left(proc, disk)
    assert f"{bomb} holds an unsafe archive member flash_attn-0.1.0/zeros.bin" in text, text
    assert "a decompression bomb" in text and "extracted nothing of it" in text, text
    assert "fix: replace " in text and "delete" not in text, text
    assert listing.read_text() == ""  # nothing was written to the small disk
