"""Loose inputs (issue 25's table), each run for real in a fresh process: one clear error (or
one line), naming the right file and the right setting, and never a fix that deletes a file of
the user's."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from conftest import PY, REPO, SAMPLE_VERSION, pack_sample

SAMPLE_SETTINGS = {"flash-attn-version": SAMPLE_VERSION, "allow-unknown-version": "true"}


def _hook(out: Path, settings: dict, cwd: Path = REPO, prefix=(), env=None):
    code = f"import fa_backend; fa_backend.build_wheel({str(out)!r}, {settings!r})"
    proc = subprocess.run(
        [*prefix, PY, "-c", code],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _one_error(proc) -> str:
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("fa-shim: error:") == 1 and "fa-shim: fix:" in proc.stderr
    return " ".join(proc.stderr.split())


def _sdist_with(directory: Path, *extra: tarfile.TarInfo) -> Path:
    """The sample's sdist plus members of another kind."""
    good = pack_sample(directory / "good")
    target = directory / "bad" / good.name
    target.parent.mkdir(parents=True)
    with tarfile.open(good) as src, tarfile.open(target, "w:gz") as dst:
        for member in src:
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        for info in extra:
            dst.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    shutil.rmtree(good.parent)
    return target


def test_a_wheel_cache_dir_that_is_a_file_is_an_error(tmp_path, sample_sdist_dir):
    (tmp_path / "a-file").write_text("x")
    settings = {**SAMPLE_SETTINGS, "wheel-cache-dir": str(tmp_path / "a-file")}
    err = _one_error(_hook(tmp_path / "out", settings))
    assert f"the wheel-cache-dir {tmp_path / 'a-file'} is a file, not a directory" in err


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("sdist", "", "setting 'sdist' from config_settings (-C) is empty"),
        ("sdist-dir", " ", "setting 'sdist-dir' from config_settings (-C) is empty"),
        ("nvcc-threads", "999999", "is '999999', expected an integer from 1 to 32"),
        ("nvcc-threads", "0", "expected an integer from 1 to 32"),
    ],
)
def test_an_empty_path_or_an_absurd_thread_count_is_refused(tmp_path, key, value, expected):
    err = _one_error(_hook(tmp_path / "out", {**SAMPLE_SETTINGS, key: value}))
    assert expected in err


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    ("member", "why"),
    [
        (_member(f"flash_attn-{SAMPLE_VERSION}/../evil.txt"), "a path out of the archive"),
        (_member("/tmp/fa-shim-absolute-evil.txt"), "an absolute path"),
        (_member(f"flash_attn-{SAMPLE_VERSION}/l", tarfile.SYMTYPE, "/etc"), "a symbolic link"),
        (_member(f"flash_attn-{SAMPLE_VERSION}/d", tarfile.CHRTYPE), "a device or special file"),
    ],
    ids=["dotdot", "absolute", "symlink", "device"],
)
def test_an_unsafe_member_is_named_and_the_users_sdist_is_kept(tmp_path, member, why):
    bad = _sdist_with(tmp_path, member)
    settings = {**SAMPLE_SETTINGS, "sdist-dir": str(bad.parent)}
    err = _one_error(_hook(tmp_path / "out", settings, env={"TMPDIR": str(tmp_path)}))
    assert f"holds an unsafe archive member {member.name} ({why})" in err
    assert "delete" not in err and bad.is_file()
    assert not Path("/tmp/fa-shim-absolute-evil.txt").exists()
    assert not (tmp_path / "evil.txt").exists() and not list(tmp_path.glob("fa-shim-build-*"))


def test_an_unreadable_sdist_is_a_read_error_naming_it(tmp_path, sample_sdist_dir):
    """As root, file permissions bind only without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH:
    setpriv drops them from the bounding set, as for an ordinary user."""
    prefix = ()
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("root reads any file; setpriv is needed to drop that capability")
        prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--")
    sdists = shutil.copytree(sample_sdist_dir, tmp_path / "sdists")
    (sdist,) = sdists.glob("*.tar.gz")
    sdist.chmod(0)
    settings = {**SAMPLE_SETTINGS, "sdist-dir": str(sdists)}
    err = _one_error(_hook(tmp_path / "out", settings, prefix=prefix))
    assert f"cannot read the sdist {sdist} (from sdist-dir {sdists}): Permission denied" in err
    assert "cannot write" not in err and "TMPDIR" not in err


def test_a_build_dir_under_tmp_is_named_by_its_option_not_tmpdir(tmp_path, sample_sdist_dir):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and a mount namespace (unshare -m) for a read-only disk")
    ro = tmp_path / "ro"
    ro.mkdir()
    args = [
        f"-C{k}={v}" for k, v in {**SAMPLE_SETTINGS, "sdist-dir": str(sample_sdist_dir)}.items()
    ]
    cmd = [PY, "-m", "fa_backend", "prepare", "--build-dir", str(ro / "b"), *args]
    quoted = " ".join(f"'{c}'" for c in cmd)
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o ro,size=64k tmpfs {ro} && {quoted}"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    err = _one_error(proc)
    assert f"cannot write {ro} (--build-dir)" in err or f"{ro / 'b'} (--build-dir)" in err, err
    assert "TMPDIR" not in err and "scratch space" not in err


def test_a_pyproject_error_names_the_files_full_path(tmp_path):
    """A consumer's build runs in a copy of the project: "pyproject.toml" alone says nothing."""
    project = tmp_path / "consumer-copy"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[tool.fa-shim]\nflash-attn-version = "2.8.3"\nmax-jbos = 2\n'
    )
    err = _one_error(_hook(tmp_path / "out", {}, cwd=project))
    assert f"unknown setting 'max-jbos' in [tool.fa-shim] of {project / 'pyproject.toml'}" in err


def test_ctrl_c_during_prepare_says_interrupted_once(tmp_path, sample_sdist_dir):
    hang = tmp_path / "cxx"  # the compiler probe of prepare waits: the interrupt comes meanwhile
    hang.write_text('#!/bin/sh\nsleep 60\nexec g++ "$@"\n')
    hang.chmod(0o755)
    args = [f"-C{k}={v}" for k, v in {**SAMPLE_SETTINGS, "sdist-dir": sample_sdist_dir}.items()]
    proc = subprocess.Popen(
        [PY, "-m", "fa_backend", "prepare", "--build-dir", tmp_path / "b", *args],
        cwd=REPO,
        env={**os.environ, "CXX": str(hang), "FA_SHIM_COMPILER_CACHE": "none"},
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a terminal's Ctrl-C reaches the whole foreground group
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(8)
    os.killpg(proc.pid, signal.SIGINT)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, err
    assert err.count("interrupted: nothing was published") == 1, err
    assert not (tmp_path / "b").exists()
