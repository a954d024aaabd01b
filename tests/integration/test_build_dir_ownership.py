"""`python -m fa_backend prepare --build-dir DIR` on real directories: a directory holding a
user's files is refused and every file kept (it used to lose DIR/src); fa-shim's own directory
is prepared again; a failed prepare leaves a user's empty directory empty."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import PY, REPO, SAMPLE_VERSION, run, sample_settings

from fa_backend.core._ownership import MARKER


def _prepare(build_dir: Path, *settings: str, check: bool = True):
    env = {**os.environ, "FA_SHIM_COMPILER_CACHE": "none"}
    return run(
        [PY, "-m", "fa_backend", "prepare", "--build-dir", build_dir, *settings],
        cwd=REPO,
        env=env,
        check=check,
    )


def test_a_users_directory_is_refused_and_nothing_of_it_is_deleted(tmp_path, sample_sdist_dir):
    build = tmp_path / "x"
    (build / "src").mkdir(parents=True)
    (build / "src" / "mine.txt").write_text("keep\n")
    proc = _prepare(build, *sample_settings(sample_sdist_dir), check=False)
    assert proc.returncode == 1, proc.stderr
    assert f"{build} (--build-dir) holds files fa-shim did not make (src)" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("fa-shim: error:") == 1
    assert (build / "src" / "mine.txt").read_text() == "keep\n"
    assert sorted(p.name for p in build.iterdir()) == ["src"]


def test_fa_shims_own_directory_is_prepared_again(tmp_path, sample_sdist_dir):
    build = tmp_path / "empty"
    build.mkdir()
    first = _prepare(build, *sample_settings(sample_sdist_dir))
    assert (build / MARKER).is_file() and '"ninja_file"' in first.stdout
    again = _prepare(build, *sample_settings(sample_sdist_dir))
    assert (build / "src" / f"flash_attn-{SAMPLE_VERSION}" / "setup.py").is_file(), again.stderr


def test_a_failed_prepare_leaves_a_users_empty_directory_empty(tmp_path):
    sdists = tmp_path / "sdists"
    sdists.mkdir()
    (sdists / f"flash_attn-{SAMPLE_VERSION}.tar.gz").write_bytes(b"not a tarball\n")
    build = tmp_path / "mine"
    build.mkdir()
    proc = _prepare(build, *sample_settings(sdists), check=False)
    assert proc.returncode == 1 and "corrupt or truncated archive" in proc.stderr, proc.stderr
    assert build.is_dir() and list(build.iterdir()) == []
