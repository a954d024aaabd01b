"""Caches a team can share: every file fa-shim publishes honours the umask (mkstemp alone gives
0600) and a second user hits the first one's wheel-cache entry and never deletes it. A cache
that cannot keep a freshly built wheel is a warning, not a lost build:
tests/unit/fleet/test_wheel_cache.py."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import packaging
import pytest
from conftest import PY, REPO, pip_wheel_cmd, run, sample_settings

from fa_backend.fleet import _wheel_cache

OTHER_USER = "fashim-b"


def _modes(*roots: Path) -> dict[str, int]:
    return {
        str(p): stat.S_IMODE(p.stat().st_mode)
        for root in roots
        for p in [root, *root.rglob("*")]
        if ".locks" not in p.parts
    }


_OBTAIN = """
import sys, zipfile
from pathlib import Path
from fa_backend.fleet import _wheel_cache
root, out, scratch = map(Path, sys.argv[1:4])
name = "demo-1.0-py3-none-any.whl"

def build():
    path = scratch / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("demo/__init__.py", "")
    return path

def check(wheel):
    with zipfile.ZipFile(wheel) as z:
        assert z.testzip() is None

print(_wheel_cache.obtain(root, {"demo": 1}, name, out, check, build, 600, 15))
"""


@pytest.mark.parametrize("mask", [0o022, 0o002])
def test_published_files_honour_the_umask(tmp_path, mask):
    """The wheel in the output directory, the cache entry, its fingerprint.json and entry.json:
    0o666 & ~umask; the directories made for them 0o777 & ~umask."""
    root, out, scratch = tmp_path / "cache" / "wheels", tmp_path / "out", tmp_path / "scratch"
    scratch.mkdir()
    code = f"umask {mask:03o}; exec {PY} -c '{_OBTAIN}' {root} {out} {scratch}"
    run(["sh", "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)})
    modes = _modes(root, out)
    files = {p: m for p, m in modes.items() if Path(p).is_file()}
    dirs = {p: m for p, m in modes.items() if Path(p).is_dir()}
    assert len(files) == 4, files  # out/, <key>/ wheel + fingerprint.json + entry.json
    assert set(files.values()) == {0o666 & ~mask}, files
    assert set(dirs.values()) == {0o777 & ~mask}, dirs


def _other_user() -> str:
    if os.geteuid() != 0:
        pytest.skip("a second user can only be made when the tests run as root")
    if subprocess.run(["id", OTHER_USER], capture_output=True).returncode != 0:
        if not shutil.which("useradd"):
            pytest.skip("no useradd to create a second user")
        proc = subprocess.run(["useradd", "-M", OTHER_USER], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot create a second user: {proc.stderr.strip()}")
    if not shutil.which("runuser"):
        pytest.skip("no runuser to run as a second user")
    return OTHER_USER


@pytest.mark.slow
def test_a_second_user_hits_the_first_users_entry_and_never_deletes_it(sample_sdist_dir):
    """User A (root, umask 022) builds the sample with pip into a shared wheel-cache-dir; user B,
    a real second uid, gets a cache hit on A's entry. After A's wheel is damaged, B's check fails
    and B builds for itself, but A's entry stays. B runs the system interpreter with fa-shim and
    its two pure-Python requirements on a readable path: this interpreter may live under a
    private home (/root is 0700)."""
    user = _other_user()
    shared = Path(tempfile.mkdtemp(prefix="fa-shim-shared-", dir="/tmp"))
    try:
        shared.chmod(0o755)
        cache = shared / "wheels"
        sdists = shutil.copytree(sample_sdist_dir, shared / "sdists")
        cmd = pip_wheel_cmd(PY, shared / "a-out", "-v", *sample_settings(sdists))
        cmd += ["-C", f"wheel-cache-dir={cache}"]
        line = " ".join(f"'{c}'" for c in cmd)
        run(["sh", "-c", f"umask 022; exec {line}"])
        (entry,) = [p for p in cache.iterdir() if (p / "entry.json").is_file()]
        (wheel,) = entry.glob("*.whl")
        assert stat.S_IMODE(wheel.stat().st_mode) == 0o644
        fingerprint = json.loads((entry / "fingerprint.json").read_text())
        assert _wheel_cache.key(fingerprint) == entry.name

        lib = shared / "lib"
        for package in (REPO / "fa_backend", *map(Path, packaging.__path__)):
            shutil.copytree(package, lib / package.name, ignore=shutil.ignore_patterns("*.pyc"))
        (shared / "fingerprint.json").write_text(json.dumps(fingerprint))
        b_home = shared / "b"
        b_home.mkdir()
        shutil.chown(b_home, user)
        code = f"""
import json, sys, zipfile
from pathlib import Path
from fa_backend.fleet import _wheel_cache
fingerprint = json.loads(Path({str(shared / "fingerprint.json")!r}).read_text())
home = Path({str(b_home)!r})

def build():
    path = home / {wheel.name!r}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("flash_attn/__init__.py", "# user B's own build")
    print("B built", flush=True)
    return path

def check(w):
    try:
        zipfile.ZipFile(w).testzip()
    except zipfile.BadZipFile as exc:
        from fa_backend.core._errors import FaShimError
        raise FaShimError(f"{{w}} is not a readable wheel", "rebuild") from exc

out = _wheel_cache.obtain(Path({str(cache)!r}), fingerprint, {wheel.name!r}, home / "out",
                          check, build, 600, 15)
print("B got", out, out.stat().st_size)
"""
        as_b = ["runuser", "-u", user, "--", "/usr/bin/python3", "-c", code]
        env = {**os.environ, "PYTHONPATH": str(lib), "HOME": str(b_home)}
        hit = run(as_b, env=env)
        assert "wheel cache hit" in hit.stderr and "B built" not in hit.stdout, hit.stderr
        assert (b_home / "out" / wheel.name).read_bytes() == wheel.read_bytes()

        # a cache B may write into (a group's, under umask 002): B's failed check must still
        # leave A's entry in place; B's own good build replaces the damaged wheel atomically
        for path in [cache, *cache.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o666 | (0o111 if path.is_dir() else 0))
        good = wheel.read_bytes()
        wheel.write_bytes(good[: len(good) // 2])
        damaged = run(as_b, env=env)
        assert "failed its check" in damaged.stderr and "B built" in damaged.stdout
        assert "not writable" not in damaged.stderr and "Traceback" not in damaged.stderr
        assert entry.stat().st_uid == 0  # A's directory: not deleted and made again by B
        assert zipfile.ZipFile(wheel).testzip() is None
    finally:
        shutil.rmtree(shared, ignore_errors=True)


if sys.platform != "linux":  # pragma: no cover
    pytestmark = pytest.mark.skip(reason="umask and second users are tested on Linux")
