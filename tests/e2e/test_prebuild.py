"""`python -m fa_backend prebuild`: one wheel per environment into a shared wheel cache.

The cheapest honest set: the sample project (C++ against torch's headers, no CUDA file, so no
nvcc step) in two environments whose torch differs in everything the fingerprint reads (torch
2.13.0 CPU in a venv over this interpreter; the CUDA 13.0 torch 2.11.0 venv), plus one broken
environment (no fa-shim requirements) that fails with its reason while the others are built.
A second run finds both wheels cached; a user of either environment then gets a cache hit.
"""

from __future__ import annotations

import re
import time
import venv

import pytest
from conftest import PY, REPO, pip_wheel_cmd, run, sample_settings

pytestmark = pytest.mark.slow


def _prebuild(pythons, options, check_rc: int):
    args = [PY, "-m", "fa_backend", "prebuild"]
    for python in pythons:
        args += ["--python", python]
    proc = run([*args, *options], check=False, cwd=REPO)
    assert proc.returncode == check_rc, proc.stdout + proc.stderr
    rows = {}
    for line in proc.stdout.splitlines()[1:]:
        cells = line.split()
        if len(cells) >= 4 and cells[0] in map(str, pythons):
            rows[cells[0]] = cells[1:4]  # fingerprint, wheel, result
    return proc, rows


def test_prebuild_builds_each_environment_once_then_users_hit(
    sample_sdist_dir, tmp_path, host_venv, torch211_python
):
    broken = tmp_path / "broken"
    venv.EnvBuilder(with_pip=False).create(broken)  # no packaging, no torch: fails, reported
    broken_python = broken / "bin" / "python"
    cache = tmp_path / "shared" / "fa"
    options = [*sample_settings(sample_sdist_dir), "-C", f"wheel-cache-dir={cache}"]
    pythons = [host_venv, broken_python, torch211_python]

    first, rows = _prebuild(pythons, options, check_rc=1)
    assert [rows[str(p)][2] for p in pythons] == ["built", "failed", "built"], first.stdout
    assert (
        f"{broken_python}: failed: {broken_python} cannot run fa-shim: ModuleNotFoundError: No "
        f"module named 'elftools'.\n  fix: install what fa-shim reads tags and ELF with: "
        f"`{broken_python} -m pip install pyelftools packaging`."
    ) in first.stdout
    assert "prebuild: 2 built, 0 cached, 1 failed" in first.stdout
    cpu, cuda = rows[str(host_venv)], rows[str(torch211_python)]
    assert re.fullmatch(r"[0-9a-f]{32}", cpu[0]) and re.fullmatch(r"[0-9a-f]{32}", cuda[0])
    assert cpu[0] != cuda[0]
    assert "cputorch2.13" in cpu[1] and "cu130torch2.11" in cuda[1]
    for key, wheel in (cpu[:2], cuda[:2]):
        assert (cache / key / wheel).is_file()

    second, again = _prebuild(pythons, options, check_rc=1)
    assert [again[str(p)][2] for p in pythons] == ["cached", "failed", "cached"], second.stdout
    assert again[str(host_venv)][:2] == cpu[:2] and again[str(torch211_python)][:2] == cuda[:2]
    assert "prebuild: 0 built, 2 cached, 1 failed" in second.stdout

    # a user of each environment: a cache hit, no compile (the CUDA venv is shared: wheel only)
    started = time.monotonic()
    pip_install = [host_venv, "-m", "pip", "install", "-v", "--no-build-isolation", "--no-deps"]
    install = run([*pip_install, REPO, *options])
    seconds = time.monotonic() - started
    assert "wheel cache hit" in install.stderr and "running upstream" not in install.stderr
    hit = run(pip_wheel_cmd(torch211_python, tmp_path / "w", "-v", *options))
    assert "wheel cache hit" in hit.stderr and "running upstream" not in hit.stderr
    print(f"\ninstall after prebuild: {seconds:.1f} s (pip install from the wheel cache)")
