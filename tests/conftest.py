"""Shared fixtures: real venvs, real pip, real torch. Nothing here mocks a tool."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import shutil
import site
import subprocess
import sys
import tarfile
import time
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
_SHARED = (
    REPO.parent / "shared" / "sdists"
)  # beside a checkout of this workplace, not a contributor's
# The upstream sdists tests read by path: ../shared/sdists where it exists, else a cache that
# pytest_sessionstart fills from the package index with fa-shim's own downloader (pins checked).
SHARED_SDISTS = (
    _SHARED
    if _SHARED.is_dir()
    else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fa-shim-test-sdists"
)
SDISTS_READ_BY_PATH = ("2.6.3", "2.7.4.post1", "2.8.3", "2.8.3.post2")
# FA_SHIM_TEST_SDIST_SEED: a directory of verified upstream sdists to copy instead of
# downloading ("" or "none": download everything from the package index)
SDIST_SEED_VARIABLE = "FA_SHIM_TEST_SDIST_SEED"
SAMPLE = TESTS / "packages" / "sample-flash-attn"
SAMPLE_CUDA = TESTS / "packages" / "sample-cuda"  # added to the sample by pack_sample(cuda=True)
TOOLS = TESTS / "tools"
SAMPLE_VERSION = "0.1.0"
# Build-time requirements of fa-shim and of flash-attn's setup.py (no torch: that comes per venv).
BUILD_TOOLS = ["setuptools>=70", "wheel", "packaging", "ninja", "psutil", "pyelftools", "filelock"]


# The smallest real flash-attn 2.8.3 build (4 kernels + flash_api.cpp at sm_80): the tests that
# need a real compile of upstream's kernels on 2 cores share it.
SMALLEST_REAL_SET = {
    "cuda-archs": "80",
    "head-dims": "128",
    "dtypes": "bf16",
    "forward-only": "true",
    "disable": "dropout,alibi,softcap,local,uneven_k",
    "max-jobs": "2",
    "nvcc-threads": "1",
}


def run(cmd, *, check=True, **kwargs) -> subprocess.CompletedProcess:
    """Run a real process; on an unexpected exit status show everything it printed."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    if check and proc.returncode != 0:
        pytest.fail(
            f"{cmd} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}",
            pytrace=False,
        )
    return proc


def make_venv(path: Path, packages: list[str], system_site_packages: bool = False) -> Path:
    # A venv over the system site-packages takes pip, setuptools & co. from there: its own
    # ensurepip copies (setuptools 65) would shadow the build tools fa-shim requires.
    venv.EnvBuilder(
        with_pip=not system_site_packages, system_site_packages=system_site_packages
    ).create(path)
    python = path / "bin" / "python"
    if packages:
        run([python, "-m", "pip", "install", "-q", *packages])
    return python


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """fa-shim's sdist cache and logs go to the test's own directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    for name in list(os.environ):
        if name.startswith("FA_SHIM_"):
            monkeypatch.delenv(name)


def pack_sample(dest: Path, version: str = SAMPLE_VERSION, cuda: bool = False) -> Path:
    """The sample project as an sdist named like upstream's: flash_attn-<version>.tar.gz.
    With `cuda`, it also compiles a real CUDA file (tests/packages/sample-cuda) through nvcc."""
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / f"flash_attn-{version}.tar.gz"
    roots = [SAMPLE, SAMPLE_CUDA] if cuda else [SAMPLE]
    files = sorted((root, p) for root in roots for p in root.rglob("*"))
    with tarfile.open(target, "w:gz") as tar:
        for root, path in files:
            if path.is_file() and "build" not in path.relative_to(root).parts:
                text = path.read_bytes().replace(SAMPLE_VERSION.encode(), version.encode())
                info = tarfile.TarInfo(f"flash_attn-{version}/{path.relative_to(root)}")
                info.size, info.mode = len(text), 0o644
                tar.addfile(info, io.BytesIO(text))
    return target


@pytest.fixture(scope="session")
def sample_sdist_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("sample-sdists")
    pack_sample(directory)
    return directory


def pip_wheel_cmd(python, out: Path, *args, project: Path = REPO) -> list:
    """`pip wheel` of this checkout (or a copy) without isolation or dependencies, into `out`."""
    return [
        python,
        "-m",
        "pip",
        "wheel",
        "--no-build-isolation",
        "--no-deps",
        "-w",
        out,
        project,
        *args,
    ]


def sample_settings(sdist_dir: Path) -> list[str]:
    """-C options that build the sample instead of the pinned upstream release."""
    return [
        "-C",
        f"flash-attn-version={SAMPLE_VERSION}",
        "-C",
        f"sdist-dir={sdist_dir}",
        "-C",
        "allow-unknown-version=true",
    ]


@pytest.fixture
def host_venv(tmp_path) -> Path:
    """A fresh venv that sees this interpreter's torch (2.13 CPU) and build tools. When the tests
    themselves run in a venv, --system-site-packages reaches only the base interpreter's
    packages: a .pth file adds this interpreter's own site-packages too."""
    python = make_venv(tmp_path / "venv", [], system_site_packages=True)
    if sys.prefix != sys.base_prefix:
        # every site directory this interpreter sees, those added by .pth files included (a .pth
        # file inside a directory named by another .pth is not read)
        seen = [*site.getsitepackages(), *sys.path]
        paths = [p for p in dict.fromkeys(seen) if p.endswith(("site-packages", "dist-packages"))]
        code = "import sys; print(next(p for p in sys.path if p.endswith('site-packages')))"
        own = run([python, "-c", code]).stdout.strip()
        (Path(own) / "_outer_venv.pth").write_text("\n".join(p for p in paths if Path(p).is_dir()))
    return python


def _torch_venv(tmp_path_factory, name: str, packages: list[str]) -> Path:
    """Created once per test run (never reused between runs, so CI always starts clean).
    For local iteration only, TEST_REUSE_VENV_<NAME>=/path/to/venv skips the download."""
    reuse = os.environ.get(f"TEST_REUSE_VENV_{name.upper()}")
    if reuse:
        return Path(reuse) / "bin" / "python"
    return make_venv(tmp_path_factory.mktemp(f"venv-{name}") / "v", [*packages, *BUILD_TOOLS])


@pytest.fixture(scope="session")
def torch211_python(tmp_path_factory) -> Path:
    """A venv with the CUDA 13.0 torch 2.11.0 from PyPI (~7 GB): imports fine without a GPU."""
    return _torch_venv(tmp_path_factory, "torch211", ["torch==2.11.0", "einops"])


@pytest.fixture(scope="session")
def torch2141_python(tmp_path_factory) -> Path:
    """A venv with the newest torch the index serves here, 2.14.1 (CUDA 13.0, C++20 headers)."""
    return _torch_venv(tmp_path_factory, "torch2141", ["torch==2.14.1", "einops"])


@pytest.fixture(scope="session")
def torch26_python(tmp_path_factory) -> Path:
    """A venv with torch 2.6.0 (CUDA 12.4, built with the old ABI, _GLIBCXX_USE_CXX11_ABI=0)."""
    return _torch_venv(tmp_path_factory, "torch26", ["torch==2.6.0", "numpy<2"])


def pytest_sessionstart(session):
    """Without ../shared, fetch the sdists that tests read by path (once: they are kept)."""
    if SHARED_SDISTS == _SHARED:
        return
    from fa_backend.core import _errors
    from fa_backend.flavours.fa2 import _releases, _sdist
    from fa_backend.sources import _index

    SHARED_SDISTS.mkdir(parents=True, exist_ok=True)
    for version in SDISTS_READ_BY_PATH:
        release = _releases.release(version)
        target = SHARED_SDISTS / release.sdist
        if target.is_file() and _sdist.sha256_of(target) == release.sha256:
            continue
        try:
            _index.download(version, SHARED_SDISTS, release.sha256)
        except _errors.FaShimError as exc:  # no index here: the tests that need it fail alone
            print(f"conftest: flash-attn {version} not fetched: {exc.cause}", file=sys.stderr)


def sdist_seed() -> Path | None:
    value = os.environ.get(SDIST_SEED_VARIABLE)
    if value is None:
        return SHARED_SDISTS
    return None if value.strip().lower() in ("", "none") else Path(value)


@pytest.fixture(scope="session")
def upstream_sdists(request) -> Path:
    """Every pinned upstream sdist in one directory: copied from the seed where it holds one
    (FA_SHIM_TEST_SDIST_SEED, default ../shared/sdists), the rest downloaded once by fa-shim's
    own downloader into pytest's cache (kept between runs), all checked against their pins."""
    from fa_backend.flavours.fa2 import _releases, _sdist
    from fa_backend.sources import _index

    directory = request.config.cache.mkdir("fa-shim-upstream-sdists")
    seed = sdist_seed()
    for version in _releases.known():
        release = _releases.release(version)
        target = directory / release.sdist
        if target.is_file() and _sdist.sha256_of(target) == release.sha256:
            continue
        if seed and (seed / release.sdist).is_file():
            shutil.copyfile(seed / release.sdist, target)
        else:
            _index.download(version, directory)
        assert _sdist.sha256_of(target) == release.sha256, f"{target.name} differs from its pin"
    return directory


# FlashAttention-3's two source trees as tarballs (see its README); tests seed from it only
FA3_SHARED = REPO.parent / "shared" / "fa3"


@pytest.fixture(scope="session")
def fa3_tarballs() -> dict[str, Path]:
    """flash-attention 2.8.3's hopper and cutlass trees, by their names in ../shared/fa3."""
    from fa_backend.flavours.fa3 import _releases as _fa3_releases
    from fa_backend.flavours.fa3 import _sources as _fa3_sources
    from fa_backend.flavours.fa3 import _trees

    release = _fa3_releases.release("2.8.3")
    found = {
        k.name: FA3_SHARED / _fa3_sources.archive_name(release, k)
        for k in (_trees.HOPPER, _trees.CUTLASS)
    }
    missing = [str(p) for p in found.values() if not p.is_file()]
    if missing:
        pytest.skip(
            f"{missing[0]} is absent: the FA3 source tests seed from ../shared/fa3 only "
            "(GitHub, where fa-shim downloads them from, is not reachable here; docs/fa3-design.md)"
        )
    return found


@pytest.fixture(scope="session")
def fa3_trees(fa3_tarballs, tmp_path_factory) -> dict[str, Path]:
    """The two trees extracted once, as `git archive` made them; copy one before changing it."""
    dest = tmp_path_factory.mktemp("fa3-trees")
    roots = {}
    for name, tarball in fa3_tarballs.items():
        with tarfile.open(tarball) as tar:
            tar.extractall(dest / name, filter="data")
        (roots[name],) = (dest / name).iterdir()
    return roots


# Markers by what a test needs, so a tier can be chosen with -m: see README "Tests".
_MARKED_FIXTURES = {
    "upstream_sdists": ["network"],
    "torch211_python": ["cuda_torch"],
    "torch26_python": ["cuda_torch"],
    # modules' own wrappers that reach torch211_python through request.getfixturevalue
    "t211": ["cuda_torch"],
    "cuda_torch_python": ["cuda_torch"],
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            for marker in _MARKED_FIXTURES.get(fixture, ()):
                item.add_marker(marker)


README = REPO / "README.md"
# The kernel set the quick start builds, through FA_SHIM_* variables (the README's environment
# spelling of -C): the real 2.8.3 sdist tailored to 4 forward kernel sources (hdim 128, bf16,
# sm_80, upstream's five DISABLE switches), each compiled in two parts plus its dispatch part.
QUICK_START_SET = {
    "FA_SHIM_HEAD_DIMS": "128",
    "FA_SHIM_DTYPES": "bf16",
    "FA_SHIM_FORWARD_ONLY": "true",
    "FA_SHIM_DISABLE": "dropout,alibi,softcap,local,uneven_k",
    "FA_SHIM_CUDA_ARCHS": "80",
    "FA_SHIM_TU_PARTS": "2",
    "FA_SHIM_NVCC_THREADS": "1",
    "FA_SHIM_COMPILER_CACHE": "none",  # a real compile, whatever ccache the CI box has
}


def quick_start_command() -> str:
    """The line after '# the main job' in the Quick start section's first bash block."""
    section = README.read_text().split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README's Quick start has no ```bash block"
    lines = block.group(1).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# the main job"))
    return lines[start + 1]


@dataclasses.dataclass(frozen=True)
class QuickStart:
    command: str
    tmp: Path  # the newcomer's working directory
    checkout: Path  # the copy of this checkout the command ran in
    python: Path  # the fresh venv's
    env: dict[str, str]  # the newcomer's shell: the venv activated, QUICK_START_SET
    fresh_freeze: str  # `pip list` of the venv before the command
    proc: subprocess.CompletedProcess
    seconds: float


@pytest.fixture(scope="session")
def quick_start(tmp_path_factory) -> QuickStart:
    """The README's main-job line, verbatim, run once by bash in a fresh `python3 -m venv` (no
    system site-packages: the venv's own pip and setuptools 65.5) from a copy of this checkout,
    as a newcomer runs it. The torch download (~7 GB) is part of it. tests/test_quickstart.py
    checks the newcomer's view; tests/test_real_build.py the wheel it built and installed: the
    suite's one real build of upstream's forward kernels (CI has 90 minutes on 2 cores)."""
    tmp = tmp_path_factory.mktemp("quick-start")
    command = quick_start_command()
    venv_dir = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv_dir], check=True)
    python = venv_dir / "bin" / "python"
    fresh = run([python, "-m", "pip", "list", "--format=freeze"]).stdout
    checkout = copy_repo(tmp / "fa-shim")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FA_SHIM_", "PYTHON"))}
    env.update(QUICK_START_SET)
    env["FA_SHIM_SDIST_DIR"] = str(SHARED_SDISTS)
    env["XDG_CACHE_HOME"] = str(tmp / "xdg-cache")  # fa-shim's caches and logs, this run's own
    env["PATH"] = f"{venv_dir / 'bin'}{os.pathsep}{env['PATH']}"  # `source venv/bin/activate`
    env["VIRTUAL_ENV"] = str(venv_dir)
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", "-e", "-c", command], cwd=checkout, env=env, capture_output=True, text=True
    )
    return QuickStart(command, tmp, checkout, python, env, fresh, proc, time.monotonic() - start)


def slow_cxx(tmp_path: Path, command: str) -> dict[str, str]:
    """CXX as a script that runs `command` (a shell line seeing the compiler's arguments as $*)
    before g++: a compile that takes as long as a test needs."""
    cxx = tmp_path / "cxx"
    cxx.write_text(f'#!/bin/sh\n{command}\nexec g++ "$@"\n')
    cxx.chmod(0o755)
    # the wrapper stands for the compiler itself: no compiler cache in front of it
    return {"CXX": str(cxx), "FA_SHIM_COMPILER_CACHE": "none"}


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without fa-shim settings, PYTHONPATH or the guard override."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FA_SHIM_")}
    env.pop("PYTHONPATH", None)
    env.pop("FLASH_ATTN_IGNORE_TORCH_MISMATCH", None)
    env.update(extra)
    return env


def overlay_venv(base_python: Path, path: Path) -> tuple[Path, Path]:
    """A venv of its own whose import path continues into the base venv's (its torch, pip and
    build tools, .pth entries included) through a .pth file: flash-attn installs here, and the
    base venv stays untouched."""
    run([base_python, "-m", "venv", "--without-pip", path])
    python = path / "bin" / "python"
    purelib = run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    ).stdout.strip()
    base_path = run(
        [
            base_python,
            "-c",
            "import os, sys, sysconfig\n"
            "std = {os.path.normpath(sysconfig.get_path(k)) for k in ('stdlib', 'platstdlib')}\n"
            "print('\\n'.join(p for p in sys.path[1:] if os.path.isdir(p)"
            " and os.path.normpath(p) not in std and os.path.basename(p) != 'lib-dynload'))",
        ]
    ).stdout
    Path(purelib, "_base_venv.pth").write_text(base_path)
    return python, Path(purelib)


def copy_repo(dest: Path) -> Path:
    """A copy of the fa-shim checkout, for tests that install from a path pip may write into."""
    ignore = shutil.ignore_patterns(".git", "__pycache__", "build", ".pytest_cache", "*.egg-info")
    shutil.copytree(REPO, dest, ignore=ignore)
    return dest


PY = sys.executable
