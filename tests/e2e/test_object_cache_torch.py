"""A new torch compiles only the binding: the kernel objects the quick start compiled under torch
2.11.0+cu130 (conftest's `quick_start`, the suite's one real build of upstream's forward kernels)
serve builds of the same set under torch 2.14.1+cu130 and 2.15.0+cu132 (C++20 headers, other
Python environments; 2.15's CUDA 13.2 takes the machine's nvcc 13.0, the same major) from the
object cache, with the same nvcc. Each compiles flash_api.cpp alone, and its wheel verifies and
imports under its torch. About 2 minutes each on 2 cores (the binding under that torch's
headers)."""

from __future__ import annotations

import glob
import json
import shutil
from pathlib import Path

import pytest
from conftest import (
    QUICK_START_SET,
    REPO,
    SHARED_SDISTS,
    clean_env,
    overlay_venv,
    rebuild_quick_start_set,
    run,
)
from packaging.version import Version

from fa_backend.core._digest import sha256_of
from fa_backend.fleet import _objects

pytestmark = [pytest.mark.realbuild, pytest.mark.slow, pytest.mark.cuda_torch]

KERNEL_SET = "hdim32.bf16.fwd.nodropout.noalibi.nosoftcap.nolocal.nounevenk"


def _rebuild(quick_start, python, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("object-cache-torch")
    log, wheel = rebuild_quick_start_set(quick_start, python, tmp)
    objects = quick_start.tmp / "xdg-cache" / "fa-shim" / "objects"  # the quick start's
    objects = [json.loads(p.read_text()) for p in objects.glob("*/object.json")]
    return {"log": log, "wheel": wheel, "objects": objects, "tmp": tmp}


@pytest.fixture(scope="module")
def rebuilt(quick_start, torch2141_python, tmp_path_factory) -> dict:
    return _rebuild(quick_start, torch2141_python, tmp_path_factory)


@pytest.fixture(scope="module")
def rebuilt215(quick_start, torch215_python, tmp_path_factory) -> dict:
    return _rebuild(quick_start, torch215_python, tmp_path_factory)


def _compiled_only_the_binding(rebuilt: dict) -> None:
    log, objects = rebuilt["log"], rebuilt["objects"]
    # the 4 forward sources, all kept by the first build
    assert len(objects) == 4 and {o["built_under"] for o in objects} == {"torch 2.11.0+cu130"}
    assert (
        "4 kernel objects from the object cache (built under torch 2.11.0+cu130), "
        "compiling flash_api.cpp\n" in log.replace("fa-shim: ", "").replace("  ", "")
    ), log[-4000:]
    assert "about to compile 1 source(s)" in log and "4 of 5 units cached" in log


def _verifies_and_imports(rebuilt: dict, base, torch_version: str, label: str) -> None:
    python, site = overlay_venv(base, rebuilt["tmp"] / "venv")
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", rebuilt["wheel"]])
    verify = run([python, "-m", "fa_backend", "verify", "flash_attn"], cwd=REPO, env=clean_env())
    assert "result: OK" in verify.stdout, verify.stdout
    code = (
        "import importlib.metadata as m, flash_attn, flash_attn_2_cuda, torch; "
        "print(m.version('flash-attn'), torch.__version__)"
    )
    out = run([python, "-c", code], cwd=rebuilt["tmp"], env=clean_env()).stdout
    flash_attn_version, running = out.split()[-2:]
    assert Version(flash_attn_version) == Version(f"2.8.3.post2+{label}.{KERNEL_SET}"), out
    assert running == torch_version, out
    assert glob.glob(str(Path(site) / "flash_attn_2_cuda*.so"))


def test_the_new_torch_compiles_only_the_binding(rebuilt):
    _compiled_only_the_binding(rebuilt)


@pytest.mark.cell(
    flavour="FA2 2.8.3.post2",
    torch="2.14.1+cu130",
    nvcc="13.0 (the kernels from the object cache, compiled under 2.11.0+cu130)",
    abi="TRUE",
    stage="compiled",
)
def test_its_wheel_verifies_and_imports_under_the_new_torch(rebuilt, torch2141_python):
    _verifies_and_imports(rebuilt, torch2141_python, "2.14.1+cu130", "cu130torch2.14cxx11abiTRUE")


def test_torch_2_15_compiles_only_the_binding(rebuilt215):
    _compiled_only_the_binding(rebuilt215)


@pytest.mark.cell(
    flavour="FA2 2.8.3.post2",
    torch="2.15.0+cu132",
    nvcc="13.0 (the kernels from the object cache, compiled under 2.11.0+cu130)",
    abi="TRUE",
    stage="compiled",
)
def test_its_wheel_verifies_and_imports_under_torch_2_15(rebuilt215, torch215_python):
    _verifies_and_imports(rebuilt215, torch215_python, "2.15.0+cu132", "cu132torch2.15cxx11abiTRUE")


def test_cache_check_rebuild_names_a_planted_object(quick_start, torch211_python, tmp_path):
    """The quick start's caches as a team's share, one kernel object planted (a flipped byte,
    its recorded sha256 edited to match): `cache check` passes it, as a build links it;
    `cache check --rebuild` compiles every kernel with no object cache and no compiler cache
    and names that entry alone. The suite's one uncached recompile of the quick start's set."""
    if quick_start.proc.returncode:
        pytest.fail(
            f"the quick start's build failed: see test_quickstart\n{quick_start.proc.stderr}"
        )
    caches = quick_start.tmp / "xdg-cache" / "fa-shim"
    root = shutil.copytree(caches / "wheels", tmp_path / "wheels")
    objects = shutil.copytree(caches / "objects", root / "objects")
    planted, *honest = _objects.entries(objects)
    data = bytearray((planted / "object.o").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (planted / "object.o").write_bytes(bytes(data))
    record = json.loads((planted / "object.json").read_text())
    record["sha256"] = sha256_of(planted / "object.o")
    (planted / "object.json").write_text(json.dumps(record))
    env = clean_env(
        **QUICK_START_SET, FA_SHIM_SDIST_DIR=str(SHARED_SDISTS), XDG_CACHE_HOME=str(tmp_path)
    )
    cli = [torch211_python, "-m", "fa_backend", "cache", "check"]
    check = run([*cli, root], cwd=REPO, env=env, check=False)
    assert f"ok      {planted.name}  object {record['source']}" in check.stdout, check.stdout

    proc = run(
        [*cli, "--rebuild", root, "-C", f"wheel-cache-dir={root}"], cwd=REPO, env=env, check=False
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr[-4000:]
    assert f"FAILED  {planted.name}  object {record['source']}" in proc.stdout, proc.stdout
    assert "not what its inputs compile to" in proc.stdout and proc.stdout.count("FAILED") == 1
    assert proc.stdout.count("the rebuild compiles it byte for byte") == len(honest), proc.stdout
    assert "kernel objects from the object cache" not in proc.stderr  # none served
