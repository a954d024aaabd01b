"""Reproducible wheels (docs/reproducibility.md): the same fingerprint gives the same bytes.

The sample is built twice by pip with everything a build should not depend on varied: the
scratch directory and TMPDIR, fa-shim's cache and wheel-cache directories, the fa-shim checkout
path, the working directory, the host name (a UTS namespace) and the user (setpriv to another
uid, keeping only the capability to read root's interpreter), the network seal, and of
course the time. One sha256. Then a real nvcc unit (the CUDA sample, against the CUDA torch)
from two scratch trees: one wheel, its device code included."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from conftest import PY, REPO, copy_repo, pack_sample, pip_wheel_cmd, run, sample_settings

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
    assert b"/fa-shim/src/" in data  # the debug info is there, under the fixed prefix


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


def _module(tmp: Path, name: str, stamps: tuple[str, str], returns: str = "p != 0") -> Path:
    """A module including two identical `#pragma once` headers (torch has two python_stub.h)
    with these mtimes, built with -g by the real g++."""
    for sub, stamp in zip("xy", stamps):
        (tmp / name / sub).mkdir(parents=True)
        header = tmp / name / sub / "stub.h"
        header.write_text(HEADER)
        os.utime(header, ns=(int(float(stamp) * 1e9),) * 2)
    source = tmp / f"{name}.cpp"
    source.write_text(
        f"#include <x/stub.h>\n#include <y/stub.h>\nint f(PyObject *p) {{ return {returns}; }}\n"
    )
    out = tmp / f"{name}.so"
    maps = [f"-ffile-prefix-map={tmp / name}=/inc", f"-ffile-prefix-map={tmp}=/src"]
    run(
        [
            "g++",
            "-g",
            "-O2",
            "-fPIC",
            "-shared",
            f"-I{tmp / name}",
            source,
            "-o",
            out,
            *maps,
            "-MMD",
        ]
    )
    return out


def _wheel(path: Path, module: Path) -> Path:
    data = module.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("m.so", data)
        zf.writestr("d-1.dist-info/fa_shim_provenance.json", "{}")
        zf.writestr(
            "d-1.dist-info/RECORD", f"m.so,sha256={digest},{len(data)}\nd-1.dist-info/RECORD,,\n"
        )
    return path


def test_headers_gcc_reads_once_by_their_mtime_change_only_the_debug_info(tmp_path):
    """GCC takes two headers of one size, content and mtime second for one under `#pragma
    once`: torch's two python_stub.h, as pip wrote them in one second or two, are read once or
    twice, and the binding's debug info differs (a lone clone's quick start against a uv venv).
    `cache check --rebuild` compares such a module by what the loader maps; another constant
    in the code is still a difference it names."""
    from fa_backend.cli import _cache_check
    from fa_backend.verify import _elf

    once = _module(tmp_path, "once", ("1767225600.1", "1767225600.9"))
    twice = _module(tmp_path, "twice", ("1767225600.9", "1767225601.1"))
    other = _module(tmp_path, "other", ("1767225600.1", "1767225600.9"), returns="p == 0")
    read = {m.stem: (tmp_path / f"{m.stem}.d").read_text().count("stub.h") for m in (once, twice)}
    assert read == {"once": 1, "twice": 2}
    assert once.read_bytes() != twice.read_bytes()
    assert _elf.loaded_digest(once.read_bytes()) == _elf.loaded_digest(twice.read_bytes())
    assert _elf.loaded_digest(once.read_bytes()) != _elf.loaded_digest(other.read_bytes())

    entry = _wheel(tmp_path / "entry.whl", once)
    for module, result in ((twice, _cache_check.OK), (other, _cache_check.FAILED)):
        fresh = _wheel(tmp_path / f"{module.stem}.whl", module)
        row = _cache_check._rebuilt(_cache_check.Row("key", entry.name), entry, _sha(entry), fresh)
        assert row.result == result, row.reason
        named = "the debug info of m.so differs" if result == _cache_check.OK else "differ: m.so"
        assert named in row.reason, row.reason
