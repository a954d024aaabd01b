"""Build-speed machinery on the sample sdist with real pip processes: the wheel cache (miss, hit,
find-links, interrupted build; concurrent builders: tests/integration/test_hostlock.py), the
out-of-memory retry and the compiler cache."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from conftest import PY, SAMPLE_VERSION, TOOLS, copy_repo, pip_wheel_cmd, run, sample_settings

from fa_backend.core import _hostlock

pytestmark = pytest.mark.slow


def _pip_wheel_cmd(out: Path, sdist_dir: Path, *extra: str) -> list:
    return pip_wheel_cmd(PY, out, "-v", *sample_settings(sdist_dir), *extra)


def _pip_wheel(out: Path, sdist_dir: Path, *extra: str, env=None, check=True):
    return run(
        _pip_wheel_cmd(out, sdist_dir, *extra), env={**os.environ, **(env or {})}, check=check
    )


def _cache_root() -> Path:
    return Path(os.environ["XDG_CACHE_HOME"]) / "fa-shim" / "wheels"


def test_second_build_is_a_cache_hit_and_the_cache_is_a_find_links_dir(
    sample_sdist_dir, tmp_path, host_venv
):
    first = _pip_wheel(tmp_path / "a", sample_sdist_dir)
    assert "running upstream setup.py (wheel)" in first.stderr
    second = _pip_wheel(tmp_path / "b", sample_sdist_dir)
    assert "wheel cache hit" in second.stderr
    assert "running upstream setup.py" not in second.stderr
    # found by prepare_metadata and handed on: build_wheel plans nothing (no torch probe again)
    assert second.stderr.count("fa-shim: building against torch") == 1, second.stderr
    assert "the wheel-cache hit prepare_metadata_for_build_wheel found, handed on" in second.stderr
    (a,), (b,) = (tmp_path / "a").glob("*.whl"), (tmp_path / "b").glob("*.whl")
    assert a.read_bytes() == b.read_bytes()
    viewed = list(_cache_root().glob("torch-*/*.whl"))  # its torch's view, no top-level copy
    assert [w.name for w in viewed] == [a.name] and not list(_cache_root().glob("*.whl"))
    entry = next(p for p in _cache_root().iterdir() if (p / "entry.json").is_file())
    facts = json.loads((entry / "fingerprint.json").read_text())
    assert facts["wheel"] == a.name and facts["torch"][2] == 1
    # the torch's directory is a --find-links directory, with no index at all
    run(
        [
            host_venv,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-deps",
            "--find-links",
            viewed[0].parent,
            f"flash-attn=={SAMPLE_VERSION}",
        ]
    )
    assert "sample" in run([host_venv, "-c", "import flash_attn; print('sample')"]).stdout


def test_a_damaged_cache_entry_is_built_again_not_installed(sample_sdist_dir, tmp_path):
    _pip_wheel(tmp_path / "a", sample_sdist_dir)
    entry = next(p for p in _cache_root().iterdir() if (p / "entry.json").is_file())
    (cached,) = entry.glob("*.whl")
    good = cached.read_bytes()
    cached.write_bytes(good[: len(good) // 2])  # a disk error, a killed copy to shared storage
    (entry / ".fa-shim-leftover.part").write_bytes(b"x")  # what a killed writer leaves
    again = _pip_wheel(tmp_path / "b", sample_sdist_dir)
    # refused on the sha256 its entry recorded, before the zip is read; never called a hit
    assert "failed its check (its sha256 is" in again.stderr
    assert "wheel cache hit" not in again.stderr and "building it again" in again.stderr
    assert "running upstream setup.py (wheel)" in again.stderr
    (b,) = (tmp_path / "b").glob("*.whl")
    assert cached.read_bytes() == b.read_bytes() and len(b.read_bytes()) > len(good) // 2
    assert not list(entry.glob("*.part"))


def test_an_unwritable_wheel_cache_still_builds(sample_sdist_dir, tmp_path):
    blocker = tmp_path / "a-file"  # not a directory: unwritable even for root
    blocker.write_text("")
    proc = _pip_wheel(tmp_path / "w", sample_sdist_dir, "-C", f"wheel-cache-dir={blocker / 'c'}")
    assert (
        f"the wheel cache {blocker / 'c'} is not writable (Not a directory): only reading it"
        in (proc.stderr)
    )
    assert len(list((tmp_path / "w").glob("*.whl"))) == 1


def test_a_compile_relevant_change_misses_the_cache(sample_sdist_dir, tmp_path):
    _pip_wheel(tmp_path / "a", sample_sdist_dir)
    changed = _pip_wheel(tmp_path / "b", sample_sdist_dir, env={"CXXFLAGS": "-DSAMPLE_EXTRA=1"})
    assert "wheel cache hit" not in changed.stderr
    assert len([p for p in _cache_root().iterdir() if (p / "entry.json").is_file()]) == 2


# hostile row X06
def test_an_interrupted_build_leaves_no_cache_entry(sample_sdist_dir, tmp_path):
    hang_cxx = tmp_path / "hang-g++"
    hang_cxx.write_text('#!/bin/sh\ncase "$*" in *" -c "*) sleep 600;; esac\nexec g++ "$@"\n')
    hang_cxx.chmod(0o755)
    scratch = tmp_path / "tmp"  # TMPDIR: the scratch directories of this test's builds
    scratch.mkdir()
    proc = subprocess.Popen(
        _pip_wheel_cmd(tmp_path / "w", sample_sdist_dir),
        env={**os.environ, "CXX": str(hang_cxx), "TMPDIR": str(scratch)},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    compiling = False
    for _ in range(480):  # until the (hanging) compile has started
        children = _descendants(proc.pid)
        if "sleep" in children.values():
            compiling = True
            break
        time.sleep(0.5)
    assert compiling, "the build never started compiling"
    started = {pid: _hostlock.started(pid) for pid in children}
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # no process of the build outlives it: the hanging compile (here the preflight's probe,
    # a wrapper script's `sleep` child) ends with the backend
    for _ in range(30):
        alive = [(p, children[p]) for p, t in started.items() if _hostlock.started(p) == t]
        if not alive:
            break
        time.sleep(0.5)
    assert not alive, alive
    assert not list(_cache_root().rglob("*.whl"))
    assert not (tmp_path / "w").exists() or not list((tmp_path / "w").iterdir())
    # SIGKILL left the build's scratch and its preflight's: the next build removes them
    left = sorted(p.name.rsplit("-", 1)[0] for p in scratch.glob("fa-shim-*"))
    assert left == ["fa-shim-build", "fa-shim-preflight"], left
    again = _pip_wheel(tmp_path / "w2", sample_sdist_dir, env={"TMPDIR": str(scratch)})
    assert "running upstream setup.py (wheel)" in again.stderr  # and it just works
    assert "removed 2 scratch directories that killed fa-shim runs left under" in again.stderr
    assert not list(scratch.glob("fa-shim-*"))


def test_a_compiler_killed_for_memory_is_retried_with_fewer_jobs(sample_sdist_dir, tmp_path):
    """The OOM killer, played by a compiler wrapper that SIGKILLs itself on its first compile."""
    marker = tmp_path / "killed-once"
    env = {"CXX": str(TOOLS / "oom-once-g++"), "OOM_ONCE_MARKER": str(marker)}
    # compiler-cache=none: the wrapper plays the compiler itself, not a child of ccache
    settings = ("-C", "max-jobs=2", "-C", "wheel-cache=false", "-C", "compiler-cache=none")
    proc = _pip_wheel(tmp_path / "w", sample_sdist_dir, *settings, env=env)
    assert marker.exists(), "the wrapper never killed itself"
    assert "a compiler was killed for lack of memory; retrying with 1 job(s)" in proc.stderr
    # the launcher's per-TU records are where the build reads them: the retry's compile counted
    compiled = re.search(r"of which \d+ s compiling (\d+) translation units", proc.stderr)
    assert compiled and int(compiled.group(1)) >= 1, proc.stderr[-2000:]
    log = Path(proc.stderr.split("full log: ")[1].split()[0]).read_text()
    assert "the compiler was killed by signal 9 (SIGKILL) while compiling flash_api.cpp" in log
    assert len(list((tmp_path / "w").glob("*.whl"))) == 1


def test_compiler_cache_makes_the_second_compile_a_hit(sample_sdist_dir, tmp_path):
    env = {"CCACHE_DIR": str(tmp_path / "ccache")}
    opts = ("-C", "wheel-cache=false", "-C", "compiler-cache=ccache")
    _pip_wheel(tmp_path / "a", sample_sdist_dir, *opts, env=env)
    run(["ccache", "--zero-stats"], env={**os.environ, **env})
    second = _pip_wheel(tmp_path / "b", sample_sdist_dir, *opts, env=env)
    assert "compiling through the compiler cache" in second.stderr
    stats = run(["ccache", "--print-stats"], env={**os.environ, **env}).stdout
    hits = dict(line.split("\t", 1) for line in stats.splitlines() if "\t" in line)
    assert int(hits["direct_cache_hit"]) + int(hits["preprocessed_cache_hit"]) >= 1
    (wheel,) = (tmp_path / "b").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        prov = json.loads(zf.read(next(n for n in zf.namelist() if n.endswith("provenance.json"))))
    # a fact of this run, not of the wheel: kept out of its bytes (pipeline/_reproducible)
    assert "compiler_cache" not in prov


def test_a_changed_backend_misses_the_cache(sample_sdist_dir, tmp_path):
    """fa-shim's __version__ does not change across commits: its sources' hash does, so a cache
    filled by an older backend never serves a build of a newer one."""
    project = copy_repo(tmp_path / "fa-shim")
    cmd = sample_settings(sample_sdist_dir)
    first = run(pip_wheel_cmd(PY, tmp_path / "a", "-v", *cmd, project=project))
    assert "running upstream setup.py (wheel)" in first.stderr
    same = run(pip_wheel_cmd(PY, tmp_path / "b", "-v", *cmd, project=project))
    assert "wheel cache hit" in same.stderr
    with (project / "fa_backend" / "core" / "_log.py").open("a") as f:
        f.write("# a change to the backend\n")
    changed = run(pip_wheel_cmd(PY, tmp_path / "c", "-v", *cmd, project=project))
    assert "wheel cache hit" not in changed.stderr
    assert "running upstream setup.py (wheel)" in changed.stderr
    entries = [p for p in _cache_root().iterdir() if (p / "entry.json").is_file()]
    sources = {json.loads((e / "fingerprint.json").read_text())["fa_shim_sources"] for e in entries}
    assert len(entries) == 2 and len(sources) == 2


def _descendants(pid: int) -> dict[int, str]:
    """pid: name of every process below pid, read from /proc (each stat's parent pid)."""
    processes = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            parent = int(text.rsplit(")", 1)[1].split()[1])
            processes[int(stat.parent.name)] = (
                parent,
                text[text.index("(") + 1 : text.rindex(")")],
            )
    found, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, name) in processes.items():
            if ppid == parent and child not in found:
                found[child] = name
                todo.append(child)
    return found
