"""A wheel cache for a whole team, with three real users (created with useradd when the tests
run as root, as CI does). Each user runs the wheel cache's own code (fleet/_wheel_cache.obtain)
with the system interpreter, under their own umask, against one shared directory:

- a world-writable root (sticky 1777, like /tmp): what user A makes there (the lock directory,
  the entry) is world-writable, so B and C take the lock and hit A's wheel;
- a team's setgid directory (2775, group fashim-team): under umask 002 the directories A makes
  are group-writable, in the team's group, setgid like their parent;
- a lock that cannot be taken (the lock directory of an older fa-shim: 0755, another user's):
  the user still gets the valid cached wheel, read-only, told which settings change that.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import packaging
import pytest
from conftest import REPO

USERS = ("fashim-a", "fashim-b", "fashim-c")
GROUP = "fashim-team"
PYTHON = "/usr/bin/python3"  # readable by every user (this interpreter may live in /root)

_OBTAIN = """
import json, sys, zipfile
from pathlib import Path
from fa_backend.fleet import _wheel_cache
root, out, name = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]

def build():
    path = out.parent / "build" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("demo/__init__.py", "# built by " + sys.argv[4])
    print("BUILT", flush=True)
    return path

print(_wheel_cache.obtain(root, {"team": 1}, name, out, lambda w: None, build, 60, 1))
"""
WHEEL = "demo-1.0-py3-none-any.whl"


def _sh(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    """Three users (A and B in the group fashim-team), fa-shim and its two pure-Python
    requirements where every user can read them; the users this made are removed after."""
    if os.geteuid() != 0:
        pytest.skip("three users can only be made when the tests run as root")
    for tool in ("useradd", "groupadd", "runuser", "userdel", "groupdel"):
        if not shutil.which(tool):
            pytest.skip(f"no {tool} to make the team's users")
    if not Path(PYTHON).is_file():
        pytest.skip(f"no {PYTHON} for the other users")
    made_users, made_group = [], False
    if _sh("getent", "group", GROUP).returncode != 0:
        proc = _sh("groupadd", GROUP)
        if proc.returncode != 0:
            pytest.skip(f"cannot make a group: {proc.stderr.strip()}")
        made_group = True
    for user in USERS:
        if _sh("id", user).returncode != 0:
            proc = _sh("useradd", "-M", user)
            if proc.returncode != 0:
                pytest.skip(f"cannot make a user: {proc.stderr.strip()}")
            made_users.append(user)
        if user != "fashim-c":
            _sh("usermod", "-a", "-G", GROUP, user)
    lib = Path(tempfile.mkdtemp(prefix="fa-shim-team-lib-", dir="/tmp"))
    lib.chmod(0o755)
    for package in (REPO / "fa_backend", *map(Path, packaging.__path__)):
        shutil.copytree(package, lib / package.name, ignore=shutil.ignore_patterns("*.pyc"))
    yield lib
    shutil.rmtree(lib, ignore_errors=True)
    for user in made_users:
        _sh("userdel", user)
    if made_group:
        _sh("groupdel", GROUP)


def _as(user: str, umask: int, lib: Path, root: Path, home: Path) -> subprocess.CompletedProcess:
    home.mkdir(parents=True, exist_ok=True)
    shutil.chown(home, user)
    code = f"umask {umask:03o}; exec {PYTHON} -c '{_OBTAIN}' {root} {home / 'out'} {WHEEL} {user}"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(lib), "HOME": str(home)}
    return subprocess.run(
        ["runuser", "-u", user, "--", "sh", "-c", code],
        env=env,
        cwd=home,  # python -c puts its working directory first on sys.path
        capture_output=True,
        text=True,
        timeout=120,
    )


def _shared(mode: int, group: str | None = None) -> Path:
    base = Path(tempfile.mkdtemp(prefix="fa-shim-team-", dir="/tmp"))
    base.chmod(0o755)
    root = base / "wheels"
    root.mkdir()
    if group:
        shutil.chown(root, group=group)
    root.chmod(mode)
    return root


def test_a_world_writable_cache_serves_a_third_user(team):
    root = _shared(0o1777)
    try:
        a = _as("fashim-a", 0o022, team, root, root.parent / "a")
        assert a.returncode == 0 and "BUILT" in a.stdout, a.stderr
        (entry,) = [p for p in root.iterdir() if len(p.name) == 32]
        for made in (root / ".locks", entry):
            assert stat.S_IMODE(made.stat().st_mode) == 0o777, made  # umask 022 notwithstanding
        for user in ("fashim-b", "fashim-c"):
            hit = _as(user, 0o022, team, root, root.parent / user)
            assert hit.returncode == 0, hit.stderr
            assert "BUILT" not in hit.stdout and "wheel cache hit" in hit.stderr, hit.stderr
            assert "cannot take a lock" not in hit.stderr  # the lock was theirs to take
            assert (root.parent / user / "out" / WHEEL).read_bytes() == (entry / WHEEL).read_bytes()
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)


def test_a_teams_setgid_directory_gets_group_writable_entries(team):
    root = _shared(0o2775, GROUP)
    try:
        a = _as("fashim-a", 0o002, team, root, root.parent / "a")
        assert a.returncode == 0, a.stderr
        (entry,) = [p for p in root.iterdir() if len(p.name) == 32]
        for made in (root / ".locks", entry):
            st = made.stat()
            assert stat.S_IMODE(st.st_mode) == 0o2775, (made, oct(st.st_mode))
            assert st.st_gid == root.stat().st_gid
        # B, in the team but under umask 022, replaces a damaged entry of A's in place
        record = json.loads((entry / "entry.json").read_text())
        (entry / WHEEL).write_bytes(b"damaged")
        b = _as("fashim-b", 0o022, team, root, root.parent / "b")
        assert b.returncode == 0 and "failed its check" in b.stderr and "BUILT" in b.stdout
        assert "could not keep" not in b.stderr, b.stderr
        assert json.loads((entry / "entry.json").read_text())["sha256"] != record["sha256"]
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)


def test_a_lock_that_cannot_be_taken_still_serves_the_cached_wheel(team):
    """A hit takes no lock (a whole entry is renamed into place whole): locks this user cannot
    take cost a hit nothing, not even a warning; a miss builds, with one warning."""
    root = _shared(0o1777)
    try:
        assert _as("fashim-a", 0o022, team, root, root.parent / "a").returncode == 0
        (root / ".locks").chmod(0o755)  # what an older fa-shim made under umask 022
        c = _as("fashim-c", 0o022, team, root, root.parent / "c")
        assert c.returncode == 0 and "BUILT" not in c.stdout, c.stderr
        assert "wheel cache hit" in c.stderr and "lock" not in c.stderr, c.stderr
        for entry in [p for p in root.iterdir() if len(p.name) == 32]:
            shutil.rmtree(entry)  # a miss takes the lock, and cannot: built, kept nowhere
        c = _as("fashim-c", 0o022, team, root, root.parent / "c")
        assert c.returncode == 0 and "BUILT" in c.stdout, c.stderr
        assert "cannot take a lock in the wheel cache" in c.stderr
        assert "-C wheel-cache-dir=DIR" in c.stderr and "-C wheel-cache=false" in c.stderr
        assert "TMPDIR" not in c.stderr
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)
