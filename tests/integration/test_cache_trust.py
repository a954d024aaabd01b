"""A wheel cache a team can audit, on the sample built by pip: every hit is checked against the
sha256 its entry recorded, its RECORD and verify; `cache check` finds a one-byte tamper and an
edited member; `--rebuild` confirms an honest entry and names one that is not what its
fingerprint builds; requirement lines carry hashes pip --require-hashes accepts; and a full
disk never leaves half an entry; an sdist replaced in place is built again, never answered by
the old wheel."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import CAN_MOUNT, PY, REPO, mounted, pack_sample, pip_wheel_cmd, run, sample_settings

SETTINGS = ("-C", "compiler-cache=none")


def _env(tmp: Path) -> dict:
    return {**os.environ, "XDG_CACHE_HOME": str(tmp / "xdg")}


def _cli(tmp: Path, *args, check=False) -> subprocess.CompletedProcess:
    return run([PY, "-m", "fa_backend", *args], cwd=REPO, env=_env(tmp), check=check)


@pytest.fixture(scope="module")
def cache(tmp_path_factory, sample_sdist_dir) -> dict:
    """The sample built once into a wheel cache: (its directory, settings, entry, wheel)."""
    tmp = tmp_path_factory.mktemp("trust")
    root = tmp / "wheels"
    settings = [*sample_settings(sample_sdist_dir), *SETTINGS, "-C", f"wheel-cache-dir={root}"]
    run(pip_wheel_cmd(PY, tmp / "out", *settings), env=_env(tmp))
    (entry,) = [p for p in root.iterdir() if len(p.name) == 32]
    (wheel,) = entry.glob("*.whl")
    return {"tmp": tmp, "root": root, "settings": settings, "entry": entry, "wheel": wheel}


def _copy(cache: dict, dest: Path) -> tuple[Path, Path, list[str]]:
    root = shutil.copytree(cache["root"], dest / "wheels")
    entry = root / cache["entry"].name
    settings = [
        s if "wheel-cache-dir" not in s else f"wheel-cache-dir={root}" for s in cache["settings"]
    ]
    return root, entry / cache["wheel"].name, settings


def _edit_member(wheel: Path, member_suffix: str) -> None:
    """Rewrite the wheel with one member changed (fresh CRC, RECORD left stale), and record the
    new bytes' sha256 in entry.json: only RECORD can tell."""
    edited = wheel.with_suffix(".edited")
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(edited, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith(member_suffix):
                data += b"\nimport os  # slipped in\n"
            zout.writestr(info, data)
    edited.replace(wheel)
    record = wheel.parent / "entry.json"
    data = json.loads(record.read_text())
    from fa_backend.fleet import _entries

    data["sha256"] = _entries.sha256_of(wheel)
    record.write_text(json.dumps(data))


def test_an_honest_cache_checks_out_and_its_entry_rebuilds_byte_for_byte(cache):
    proc = _cli(cache["tmp"], "cache", "check", cache["root"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hash, RECORD and verify: OK" in proc.stdout and "1 ok, 0 failed" in proc.stdout
    rebuilt = _cli(cache["tmp"], "cache", "check", "--rebuild", cache["root"], *cache["settings"])
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert "rebuilt byte for byte (sha256 " in rebuilt.stdout


def test_a_one_byte_tamper_is_found_and_refused(cache, tmp_path):
    root, wheel, settings = _copy(cache, tmp_path)
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0x01
    wheel.write_bytes(bytes(data))
    proc = _cli(tmp_path, "cache", "check", root)
    assert proc.returncode == 1 and "not the wheel it stored: its sha256 is" in proc.stdout
    build = run(pip_wheel_cmd(PY, tmp_path / "out", "-v", *settings), env=_env(tmp_path))
    assert "failed its check (its sha256 is" in build.stderr
    assert "wheel cache hit" not in build.stderr  # no hit line for what is not served
    (served,) = (tmp_path / "out").glob("*.whl")
    assert served.read_bytes() == cache["wheel"].read_bytes()  # rebuilt: the same bytes


def test_an_edited_member_with_a_stale_record_is_refused_and_rebuilt(cache, tmp_path):
    root, wheel, settings = _copy(cache, tmp_path)
    _edit_member(wheel, "flash_attn/__init__.py")
    with zipfile.ZipFile(wheel) as zf:
        assert zf.testzip() is None  # a valid zip: only RECORD tells
    verify = _cli(tmp_path, "verify", wheel)
    assert verify.returncode == 1 and "FAIL  record" in verify.stdout, verify.stdout
    check = _cli(tmp_path, "cache", "check", root)
    assert check.returncode == 1 and "RECORD does not match: flash_attn/__init__.py" in check.stdout
    build = run(pip_wheel_cmd(PY, tmp_path / "out", "-v", *settings), env=_env(tmp_path))
    assert "failed its check" in build.stderr and "record" in build.stderr
    assert "wheel cache hit" not in build.stderr
    (served,) = (tmp_path / "out").glob("*.whl")
    assert served.read_bytes() == cache["wheel"].read_bytes()


# hostile row OC13
def test_check_lists_what_writers_left_and_sweep_removes_it(cache, tmp_path):
    """A hit of fa-shim 0.5 left its torch directory's temporary link in the root (a hard link
    of the wheel), and killed writers of the object cache an entry being written and a damaged
    one moved aside, hours ago: failures `--sweep` removes; a fresh one may be a live write,
    listed and kept."""
    root, wheel, _ = _copy(cache, tmp_path)
    objects = root / "objects"
    old = [root / ".fa-shim-0123456789ab.part", objects / f".{'ab' * 16}.part-0123abcd"]
    old.append(objects / f".{'cd' * 16}.bad-4567cdef")
    fresh = root / ".fa-shim-ba9876543210.part"
    os.link(wheel, old[0])
    for directory in old[1:]:
        directory.mkdir(parents=True)
        (directory / "object.o").write_bytes(b"half")
    for path in old:
        os.utime(path, (os.stat(path).st_atime, os.stat(path).st_mtime - 7200))
    fresh.mkdir()  # an entry being assembled
    proc = _cli(tmp_path, "cache", "check", root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for path in old:
        at = lines.index(next(line for line in lines if path.name in line))
        assert lines[at].startswith("FAILED") and "2.0 h old" in lines[at + 1], lines
        assert "`cache check --sweep` removes it" in lines[at + 1]
    assert any(line.startswith("stray") and fresh.name in line for line in lines)
    assert lines[-1] == "cache check: 1 ok, 3 failed, 1 being written"
    swept = _cli(tmp_path, "cache", "check", "--sweep", root)
    assert swept.returncode == 0, swept.stdout + swept.stderr
    assert swept.stdout.count("removed (a leftover 2.0 h old)") == 3, swept.stdout
    assert not any(p.exists() for p in old) and fresh.is_dir() and wheel.is_file()
    again = _cli(tmp_path, "cache", "check", root)
    assert again.stdout.splitlines()[-1] == "cache check: 1 ok, 0 failed, 1 being written"


def test_rebuild_names_an_entry_that_is_not_what_its_fingerprint_builds(cache, tmp_path):
    """A sound wheel (sha256, RECORD and verify pass) whose bytes a rebuild does not give:
    here re-zipped stored instead of deflated, its entry.json updated to match."""
    root, wheel, settings = _copy(cache, tmp_path)
    other = wheel.with_suffix(".other")
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(other, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            info.compress_type = zipfile.ZIP_STORED
            zout.writestr(info, data)
    other.replace(wheel)
    _edit_member(wheel, "no such member")  # only re-records the sha256
    assert _cli(tmp_path, "cache", "check", root).returncode == 0
    proc = _cli(tmp_path, "cache", "check", "--rebuild", root, *settings)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "not what its fingerprint builds" in proc.stdout
    assert "members that differ: none (the zip itself)" in proc.stdout


def test_requirement_lines_install_with_require_hashes(cache, tmp_path):
    lines = _cli(cache["tmp"], "cache", "requirements", cache["root"], check=True).stdout
    (line,) = lines.splitlines()
    assert line.startswith("flash-attn==0.1.0+cputorch2.13cxx11abitrue --hash=sha256:")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(line + "\n")
    run(
        [PY, "-m", "pip", "install", "--no-deps", "--no-index", "--require-hashes", "--target",
         tmp_path / "site", "--find-links", next(cache["root"].glob("torch-*")), "-r",
         requirements],
    )  # fmt: skip
    assert list((tmp_path / "site").glob("flash_attn-*.dist-info"))


CONSUMER = """[project]
name = "consumer"
version = "0.1"
requires-python = "==3.11.*"
dependencies = ["flash-attn", "torch"]  # a CPU team names its torch and its index

[[tool.uv.index]]
name = "team"
url = "{url}"
explicit = true

[[tool.uv.index]]
name = "torch-cpu"
url = "{torch}"
explicit = true

[tool.uv.sources]
flash-attn = {{ index = "team" }}
torch = {{ index = "torch-cpu" }}
"""


def test_the_torchs_index_serves_pip_and_a_uv_project(cache, tmp_path, torch_index):
    """The cache's PEP 503 index of torch 2.13.0+cpu, as docs/guides/fleet.md gives it: pip
    installs the team's wheel from it (its link's #sha256 checked), and a uv project with the
    index explicit for flash-attn locks the team's wheel with its entry's hash, no sdist, and
    the +cpu torch it requires from the CPU torch's own index, as a CPU team's project has it."""
    index = cache["root"] / "index" / "torch-2.13.0+cpu"
    entry = json.loads((cache["entry"] / "entry.json").read_text())
    run(
        [PY, "-m", "pip", "install", "--no-deps", "--target", tmp_path / "site",
         "--index-url", index.as_uri(), "flash-attn"],
    )  # fmt: skip
    (installed,) = (tmp_path / "site").glob("flash_attn-*.dist-info")
    assert installed.name.lower() == "flash_attn-0.1.0+cputorch2.13cxx11abitrue.dist-info"
    project = tmp_path / "consumer"
    project.mkdir()
    (project / "pyproject.toml").write_text(CONSUMER.format(url=index.as_uri(), torch=torch_index))
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv"), "UV_PYTHON_DOWNLOADS": "never"}
    run(["uv", "lock", "--python", PY], cwd=project, env=env)
    lock = (project / "uv.lock").read_text()
    block = lock[lock.index('name = "flash-attn"\nversion') :].split("\n\n")[0]
    assert 'version = "0.1.0+cputorch2.13cxx11abitrue"' in block and "sdist" not in block
    assert f'hash = "sha256:{entry["sha256"]}"' in block, block


def test_a_torch_views_file_that_is_no_wheel_is_put_back_by_the_next_hit(cache, tmp_path):
    """Issue 54's TC14 and C07 in a CPU torch's cache: the view's file cut to 30 kB, then a link
    to a file of the user's: each next hit puts the entry's link back (no "and stays"), the
    user's file untouched, and --find-links installs from the view again."""
    root, wheel, settings = _copy(cache, tmp_path)
    view = root / "torch-2.13.0+cpu" / wheel.name
    mine = tmp_path / "mine.whl"
    mine.write_bytes(b"the user's own file\n")
    for damage in ("truncated", "a link to the user's file"):
        view.unlink()
        if damage == "truncated":
            view.write_bytes(wheel.read_bytes()[:30_000])
        else:
            view.symlink_to(mine)
        hit = run(pip_wheel_cmd(PY, tmp_path / "out", "-v", *settings), env=_env(tmp_path))
        assert "wheel cache hit" in hit.stderr and "and stays" not in hit.stderr, hit.stderr
        assert not view.is_symlink() and view.stat().st_ino == wheel.stat().st_ino, damage
    assert mine.read_bytes() == b"the user's own file\n"
    run([PY, "-m", "pip", "download", "--no-deps", "--no-index", "--find-links", view.parent,
         "-d", tmp_path / "got", "flash-attn"])  # fmt: skip
    assert (tmp_path / "got" / wheel.name).read_bytes() == wheel.read_bytes()


def test_a_deleted_wheel_is_named_where_its_torchs_index_still_links_it(cache, tmp_path):
    """Issue 54's TC07: the wheel deleted from its entry and the torch's view by hand: pip fails
    on the index that links it, and `cache check` names that index and the missing file, beside
    the incomplete entry."""
    root, wheel, _ = _copy(cache, tmp_path)
    view = root / "torch-2.13.0+cpu" / wheel.name
    wheel.unlink()
    view.unlink()
    proc = _cli(tmp_path, "cache", "check", root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    at = lines.index(f"FAILED  index/torch-2.13.0+cpu/flash-attn  {wheel.name}")
    assert lines[at + 1].strip().startswith(f"the index links {view}, which is gone")
    assert any(line.startswith(f"FAILED  {wheel.parent.name}") for line in lines), lines


def test_a_full_cache_disk_leaves_no_half_entry(sample_sdist_dir, tmp_path):
    """ENOSPC while the entry is written (a 20 KiB disk: fingerprint.json fits, the wheel does
    not): the wheel is still delivered, and the cache holds no fingerprint.json on its own."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and a mount namespace (unshare -m) for a real small disk")
    cache = tmp_path / "small"
    cache.mkdir()
    cmd = pip_wheel_cmd(PY, tmp_path / "out", "-v", *sample_settings(sample_sdist_dir), *SETTINGS)
    cmd += ["-C", f"wheel-cache-dir={cache}"]
    quoted = " ".join(f"'{c}'" for c in cmd)
    script = f"mount -t tmpfs -o size=20k tmpfs {cache} && {quoted} && echo LISTING && find {cache}"
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], env=_env(tmp_path), capture_output=True, text=True
    )
    if "mount:" in proc.stderr and proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert "could not keep this wheel (No space left on device" in proc.stderr
    assert len(list((tmp_path / "out").glob("*.whl"))) == 1
    listing = proc.stdout.split("LISTING", 1)[1]
    assert "fingerprint.json" not in listing and ".part" not in listing, listing


@pytest.mark.skipif(not CAN_MOUNT, reason="needs root and a mount namespace (unshare -m)")
@pytest.mark.parametrize("how", ["ro", "full"])
def test_a_read_only_or_full_wheel_cache_builds_with_one_warning(cache, tmp_path, how):
    """A team's share mounted read-only (holding another build's entry), or a full disk: a
    miss is built and delivered, one warning names the cache, and nothing is written there."""
    # a full disk holds the cache and the files that filled it (beside it: a file of another's
    # in the cache's own directory is refused, as the ownership check says)
    disk = tmp_path / "disk"
    root = _copy(cache, tmp_path)[0] if how == "ro" else disk / "wheels"
    root.mkdir(parents=True, exist_ok=True)
    before = sorted(str(p) for p in root.rglob("*"))
    settings = [
        s if "wheel-cache-dir" not in s else f"wheel-cache-dir={root}" for s in cache["settings"]
    ]
    line = " ".join(f"'{c}'" for c in pip_wheel_cmd(PY, tmp_path / "out", "-v", *settings))
    script = f"mkdir -p {root} && {line} && echo LISTING && find {root} -mindepth 1"
    env = {**_env(tmp_path), "CXXFLAGS": "-DSAMPLE_EXTRA=1"}  # another fingerprint: a miss
    proc = run([*mounted(root if how == "ro" else disk, how), "sh", "-c", script], env=env)
    assert len(list((tmp_path / "out").glob("*.whl"))) == 1, proc.stderr
    warned = [w for w in proc.stderr.splitlines() if "warning:" in w and str(root) in w]
    why = {"ro": "Read-only file system", "full": "No space left on device"}[how]
    assert len(warned) == 1 and f"the wheel cache {root} is not writable ({why})" in warned[0]
    assert "-C wheel-cache=false" in warned[0]
    listing = sorted(proc.stdout.split("LISTING\n", 1)[1].split())
    assert listing == (before if how == "ro" else [])


def test_an_sdist_replaced_in_place_is_built_again(tmp_path):
    """An sdist fa-shim does not pin (a fork's, say), replaced under the same name by one whose
    flash_attn/__init__.py changed: the wheel cache's answer rests on the sdist's bytes, so the
    second build is a miss and its wheel holds the new file."""
    sdist = pack_sample(tmp_path / "sdists")
    settings = [*sample_settings(sdist.parent), *SETTINGS]
    run(pip_wheel_cmd(PY, tmp_path / "a", "-v", *settings), env=_env(tmp_path))
    member = f"{sdist.name.removesuffix('.tar.gz')}/flash_attn/__init__.py"
    with tarfile.open(sdist) as tar:
        members = [(info, tar.extractfile(info).read()) for info in tar.getmembers()]
    with tarfile.open(sdist, "w:gz") as tar:
        for info, data in members:
            data += b"FORK = True\n" if info.name == member else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    again = run(pip_wheel_cmd(PY, tmp_path / "b", "-v", *settings), env=_env(tmp_path))
    assert "wheel cache hit" not in again.stderr, again.stderr
    (wheel,) = (tmp_path / "b").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert "FORK = True" in zf.read("flash_attn/__init__.py").decode()
