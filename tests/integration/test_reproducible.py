"""Reproducible wheels (docs/reproducibility.md): the same fingerprint gives the same bytes.

The sample is built twice by pip with everything a build should not depend on varied: the
scratch directory and TMPDIR, fa-shim's cache and wheel-cache directories, the fa-shim checkout
path, the working directory, the host name (a UTS namespace) and the user (setpriv to another
uid, keeping only the capability to read root's interpreter), the network seal, and of
course the time. One sha256. Then a real nvcc unit (the CUDA sample, against the CUDA torch)
from two scratch trees: one wheel, its device code included."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from conftest import PY, REPO, copy_repo, pack_sample, pip_wheel_cmd, run, sample_settings
from elftools.elf.elffile import ELFFile

from fa_backend.pipeline._reproducible import NO_DEBUG_INFO

OTHER_USER = "fashim-b"


def _sha(wheel: Path) -> str:
    return hashlib.sha256(wheel.read_bytes()).hexdigest()


def _as_someone_else(home: Path) -> list[str]:
    """A prefix running the command on another host as another user, where this box allows."""
    prefix: list[str] = []
    if os.geteuid() != 0:
        return prefix
    if shutil.which("unshare"):
        prefix = ["unshare", "--uts", "sh", "-c", 'hostname fa-shim-elsewhere && exec "$@"', "sh"]
    if (
        shutil.which("setpriv")
        and subprocess.run(["id", OTHER_USER], capture_output=True).returncode
    ):
        subprocess.run(["useradd", "-M", OTHER_USER], capture_output=True)
    if (
        shutil.which("setpriv")
        and not subprocess.run(["id", OTHER_USER], capture_output=True).returncode
    ):
        for path in [home, *home.rglob("*")]:
            shutil.chown(path, OTHER_USER)
        prefix += [
            "setpriv", f"--reuid={OTHER_USER}", f"--regid={OTHER_USER}", "--clear-groups",
            "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--",
        ]  # fmt: skip
    return prefix


def _build(python, project: Path, home: Path, sdists: Path, *extra: str, elsewhere=False) -> Path:
    tmp = home / "deep" / "scratch"
    tmp.mkdir(parents=True)
    env = {
        **os.environ,
        "TMPDIR": str(tmp),
        "XDG_CACHE_HOME": str(home / "xdg"),
        "HOME": str(home),
        "PIP_NO_CACHE_DIR": "1",
    }
    settings = [*sample_settings(sdists), "-C", "compiler-cache=none", *extra]
    settings += ["-C", f"wheel-cache-dir={home / 'wheels'}"]
    prefix = _as_someone_else(home) if elsewhere else []
    if elsewhere:  # another seal too: the user namespace would lose the capability to read /root
        env["_FA_SHIM_TEST_SEAL"] = "proxy"
    run([*prefix, *pip_wheel_cmd(python, home / "out", *settings, project=project)], env=env,
        cwd=home)  # fmt: skip
    (wheel,) = (home / "out").glob("*.whl")
    return wheel


def test_the_sample_built_twice_with_everything_varied_is_one_wheel(tmp_path, sample_sdist_dir):
    first = _build(PY, REPO, tmp_path / "a", sample_sdist_dir)
    home = tmp_path / "b-elsewhere"
    checkout = copy_repo(home / "checkouts" / "fa-shim-copy")
    second = _build(PY, checkout, home, sample_sdist_dir, elsewhere=True)
    assert _sha(first) == _sha(second), "two builds of one fingerprint differ"
    with zipfile.ZipFile(second) as zf:
        (module,) = [n for n in zf.namelist() if n.endswith(".so")]
        data = zf.read(module)
    assert b"fa-shim-build-" not in data and str(tmp_path).encode() not in data
    sections = [s.name for s in ELFFile(io.BytesIO(data)).iter_sections()]
    assert not [n for n in sections if n.startswith(".debug")]  # -g0 after Python's -g


def test_a_cuda_unit_from_two_scratch_trees_is_one_wheel(tmp_path, torch211_python):
    """nvcc's host side (tmpxft_<pid> names, paths) and device side (module id, the source
    path) through fa-shim's launcher, against the CUDA torch, in two scratch trees."""
    if not shutil.which("nvcc"):
        pytest.skip("no nvcc on PATH")
    sdists = tmp_path / "sdists"
    pack_sample(sdists, cuda=True)
    wheels = [
        _build(
            torch211_python,
            Path(__file__).parents[2],
            tmp_path / name,
            sdists,
            "-C",
            "cuda-archs=80",
        )
        for name in ("one", "two-elsewhere")
    ]
    assert _sha(wheels[0]) == _sha(wheels[1]), "two builds of one CUDA fingerprint differ"
    # torch wrote the sample's -gencode=arch=... as one token: its archs recorded (issue 55, K3)
    with zipfile.ZipFile(wheels[0]) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith("/fa_shim_provenance.json")]
        assert json.loads(zf.read(name))["cuda_archs"] == ["80"]


HEADER = "#pragma once\nstruct _object;\nusing PyObject = _object;\n"  # torch's python_stub.h


def _module(tmp: Path, name: str, stamps: tuple[str, str], *flags: str) -> Path:
    """A module including two identical `#pragma once` headers (torch has two python_stub.h)
    with these mtimes, built in tmp/name by the real g++ with Python's -g and then `flags`."""
    for sub, stamp in zip("xy", stamps):
        (tmp / name / sub).mkdir(parents=True)
        header = tmp / name / sub / "stub.h"
        header.write_text(HEADER)
        os.utime(header, ns=(int(float(stamp) * 1e9),) * 2)
    source = tmp / name / "m.cpp"
    source.write_text(
        "#include <x/stub.h>\n#include <y/stub.h>\nint f(PyObject *p) { return !p; }\n"
    )
    run(["g++", "-g", "-O2", "-fPIC", "-shared", "-I.", "m.cpp", "-o", "m.so", "-MMD",
         f"-ffile-prefix-map={tmp / name}=/src", *flags], cwd=tmp / name)  # fmt: skip
    return tmp / name / "m.so"


def test_torch_headers_mtimes_reach_no_debug_info_of_the_binding(tmp_path):
    """GCC takes two headers of one size, content and mtime second for one under `#pragma
    once`: torch's two python_stub.h, as pip wrote them in one second or two, are read once or
    twice, which changed a few bytes of flash_api.cpp's debug info (its location lists: the
    record in bench/results/2026-12-02-ci-runs). After Python's -g, fa-shim's -g0
    (pipeline/_reproducible.py) leaves the module no debug section: one file either way."""
    once = _module(tmp_path, "once", ("1767225600.1", "1767225600.9"), NO_DEBUG_INFO)
    twice = _module(tmp_path, "twice", ("1767225600.9", "1767225601.1"), NO_DEBUG_INFO)
    read = [m.with_suffix(".d").read_text().count("stub.h") for m in (once, twice)]
    assert read == [1, 2]
    with once.open("rb") as f:
        sections = [s.name for s in ELFFile(f).iter_sections()]
    assert ".symtab" in sections and not [n for n in sections if n.startswith(".debug")]
    assert once.read_bytes() == twice.read_bytes()
