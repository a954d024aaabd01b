"""FlashAttention-2 on torch's stable ABI (-C torch-abi=stable, docs/guides/stable-abi.md): the
quick start's set built under torch 2.14.1+cu130 takes the quick start's 4 kernel objects
(compiled under torch 2.11 as the per-torch line) from the object cache and compiles the stable
binding alone; its one cp310-abi3 wheel requires torch>=2.10, verifies and imports under torch
2.14.1, 2.11.0 and 2.15.0 (released after the wheel's torch), where the binding's ops are
registered and answer a CPU tensor with upstream's RuntimeError. A torch older than the line's
floor (2.9.1) is refused before anything is fetched or compiled, naming the per-torch line. The
kernels run on a GPU: bench/results (GPU box)."""

from __future__ import annotations

import json
import shlex
import sys
import zipfile
from urllib.parse import unquote

import pytest
from conftest import (
    QUICK_START_SET,
    REPO,
    UV_CACHE,
    clean_env,
    overlay_venv,
    rebuild_quick_start_set,
    run,
)
from packaging.version import Version

pytestmark = [pytest.mark.realbuild, pytest.mark.slow, pytest.mark.cuda_torch]

KERNEL_SET = "hdim32.bf16.fwd.nodropout.noalibi.nosoftcap.nolocal.nounevenk"
VERSION = f"2.8.3.post2+cu13.torch2.10plus.{KERNEL_SET}"
OPS = ("fwd", "varlen_fwd", "bwd", "varlen_bwd", "fwd_kvcache")
STABLE = ("-C", "torch-abi=stable")


@pytest.fixture(scope="module")
def stable(quick_start, torch2141_python, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("fa2-stable")
    log, wheel = rebuild_quick_start_set(quick_start, torch2141_python, tmp, *STABLE)
    return {"log": log, "wheel": wheel, "tmp": tmp}


def test_the_stable_build_compiles_only_its_binding_and_makes_one_abi3_wheel(stable):
    log = " ".join(stable["log"].replace("fa-shim: ", "").split())
    assert (
        "4 kernel objects from the object cache (built under torch 2.11.0+cu130), compiling "
        "flash_api_stable.cpp" in log
    ), log[-4000:]
    wheel = stable["wheel"]
    assert wheel.name == f"flash_attn-{VERSION}-cp310-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel) as zf:
        (metadata,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        lines = zf.read(metadata).decode().splitlines()
        requires = [ln for ln in lines if ln.startswith("Requires-Dist: torch")]
        (provenance,) = [n for n in zf.namelist() if n.endswith("fa_shim_provenance.json")]
        provenance = json.loads(zf.read(provenance))
    assert requires == ["Requires-Dist: torch>=2.10"], requires
    torch = provenance["torch"]
    assert torch["stable_abi"] == "2.10.0" and torch["version"] == "2.14.1+cu130", torch
    assert [p["name"] for p in provenance["patches"]][-3:] == [
        "60-stable-binding.patch", "61-stable-ops.patch", "62-stable-setup.patch"
    ]  # fmt: skip


def _verify_import_and_call(stable: dict, base, torch_version: str, frontend: str) -> None:
    """The stable wheel installed by pip or uv in a venv over `base`'s torch: verify passes,
    flash_attn imports, the binding's ops are registered, and a CPU tensor gets upstream's
    RuntimeError from the op."""
    python, _ = overlay_venv(base, stable["tmp"] / f"venv-{torch_version}")
    install = {
        "pip": [python, "-m", "pip", "install"],
        "uv": ["uv", "pip", "install", "--python", python],
    }[frontend]
    install += ["-q", "--no-deps", "--no-index", stable["wheel"]]
    run(install, env=clean_env(UV_CACHE_DIR=str(UV_CACHE)))
    verify = run([python, "-m", "fa_backend", "verify", "flash_attn"], cwd=REPO, env=clean_env())
    assert "result: OK" in verify.stdout, verify.stdout
    assert "stable ABI (torch >= 2.10.0)" in verify.stdout, verify.stdout
    code = f"""
import importlib.metadata as m, torch
from flash_attn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache
from flash_attn.flash_attn_interface import flash_attn_gpu
print(m.version("flash-attn"), torch.__version__)
for op in {OPS!r}:
    print(op, getattr(torch.ops.flash_attn_2_stable, op).default._schema)
q = torch.zeros(1, 8, 2, 32, dtype=torch.bfloat16)
try:
    flash_attn_gpu.fwd(q, q, q, None, None, 0.0, 1.0, False, -1, -1, 0.0, False, None)
except RuntimeError as exc:
    print("RuntimeError:", exc)
"""
    out = run([python, "-c", code], cwd=stable["tmp"], env=clean_env()).stdout.splitlines()
    version, running = out[0].split()
    assert Version(version) == Version(VERSION) and running == torch_version, out[0]
    schemas = dict(line.split(" ", 1) for line in out[1:6])
    assert list(schemas) == list(OPS)
    assert schemas["fwd"].startswith(
        "flash_attn_2_stable::fwd(Tensor q, Tensor k, Tensor v, Tensor(a!)? out"
    ), schemas["fwd"]
    assert "int philox_offset, Tensor(b!)? philox_drawn)" in schemas["fwd"], schemas["fwd"]
    assert out[6].startswith("RuntimeError: mha_fwd") and out[6].endswith("q must be on CUDA")


@pytest.mark.cell(
    flavour="FA2 2.8.3.post2, torch's stable ABI",
    torch="2.14.1+cu130",
    nvcc="13.0 (the kernels from the object cache, compiled under 2.11.0+cu130)",
    abi="stable ABI",
    stage="compiled",
)
def test_the_wheel_verifies_imports_and_registers_its_ops_under_the_torch_it_was_built_with(
    stable, torch2141_python
):
    _verify_import_and_call(stable, torch2141_python, "2.14.1+cu130", "pip")


@pytest.mark.cell(
    flavour="FA2 2.8.3.post2, torch's stable ABI",
    torch="2.11.0+cu130",
    nvcc="13.0 (the wheel built under torch 2.14.1+cu130)",
    abi="stable ABI",
    stage="imported",
)
def test_the_same_wheel_verifies_imports_and_registers_its_ops_under_an_older_torch(
    stable, torch211_python
):
    _verify_import_and_call(stable, torch211_python, "2.11.0+cu130", "uv")


@pytest.mark.cell(
    flavour="FA2 2.8.3.post2, torch's stable ABI",
    torch="2.15.0+cu132",
    nvcc="13.0 (the wheel built under torch 2.14.1+cu130)",
    abi="stable ABI",
    stage="imported",
)
def test_the_same_wheel_verifies_imports_and_registers_its_ops_under_a_newer_torch(
    stable, torch215_python
):
    """torch 2.15.0, released after the wheel was built: nothing is built for it."""
    _verify_import_and_call(stable, torch215_python, "2.15.0+cu132", "pip")


# hostile row SA10
def test_the_team_install_takes_it_for_a_torch_that_did_not_build_it(
    stable, quick_start, torch211_python
):
    """The wheel cache the quick start (torch 2.11, the per-torch build of this set) and the
    stable build share: the stable wheel's view is named for the torches it serves, never for
    the one that built it; in torch 2.11's venv install.py would take the per-torch build (the
    exact one) and, with --binding stable, installs the stable one, which imports there."""
    root = quick_start.tmp / "xdg-cache" / "fa-shim" / "wheels"
    name = stable["wheel"].name
    assert (root / "stable-cu13-torch2.10plus" / KERNEL_SET / name).is_file()
    assert not list(root.glob(f"torch-*/**/{name}"))
    python, _ = overlay_venv(torch211_python, stable["tmp"] / "venv-team")
    ask = [python, root / "install.py", "--kernel-set", KERNEL_SET]
    exact = unquote(shlex.split(run([*ask, "--dry-run"], env=clean_env()).stdout)[-1])
    assert "+cu130torch2.11cxx11abiTRUE." in exact, exact
    installed = run([*ask, "--binding", "stable"], env=clean_env()).stderr
    assert f"installed flash-attn {VERSION}; torch 2.11.0+cu130 untouched" in installed, installed
    code = "import flash_attn.flash_attn_interface, importlib.metadata as m; "
    code += "print(m.version('flash-attn'))"
    assert run([python, "-c", code], cwd=stable["tmp"], env=clean_env()).stdout.strip() == VERSION


# hostile rows SA11, SA12, SA13, SA14
def test_a_stable_only_cache_answers_each_teammate(
    stable, torch211_python, torch291_python, tmp_path
):
    """The stable wheel alone in a team cache, laid out by the wheel cache's own code: torch
    2.11 (CUDA 13) takes it (SA14); with --binding torch, a miss naming why (SA13); a CPU torch
    (SA11) and torch 2.9.1 (SA12) a miss naming the CUDA major and the floor."""
    from fa_backend.fleet import _entries, _wheel_cache

    root = tmp_path / "fa"
    (root / ".locks").mkdir(parents=True)
    stored = _entries.store(root, "0" * 32, stable["wheel"], {"stable": 1}, {})
    _wheel_cache._torch_view(root, stored, "2.14.1+cu130")
    view = root / "index" / "stable-cu13-torch2.10plus"
    assert not list(root.glob("torch-*")) and view.is_dir(), list(root.iterdir())
    ask = [root / "install.py", "--kernel-set", KERNEL_SET, "--dry-run"]

    def answer(python, *more):
        return run([python, *ask, *more], env=clean_env(), check=False)

    took = answer(torch211_python)
    assert took.returncode == 0 and stable["wheel"].name.replace("+", "%2B") in took.stdout, took
    for python, more, why in (
        (torch211_python, ["--binding", "torch"], "stable ABI, not --binding torch"),
        (sys.executable, [], "CUDA 13.0 vs none"),
        (torch291_python, [], "older than 2.10.0, the oldest this stable-ABI module runs on"),
    ):
        proc = answer(python, *more)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "install.py: no flash-attn wheel for torch" in proc.stderr and why in proc.stderr


def test_a_torch_older_than_the_floor_is_refused_before_anything_is_fetched(
    torch291_python, tmp_path
):
    env = clean_env(**QUICK_START_SET, XDG_CACHE_HOME=str(tmp_path / "xdg"))  # no sdist here
    command = [torch291_python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
               "--no-index", "-w", tmp_path / "dist", REPO, *STABLE]  # fmt: skip
    proc = run(command, env=env, cwd=tmp_path, check=False)
    err = " ".join(proc.stderr.split())
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert not (tmp_path / "xdg" / "fa-shim" / "sdists").exists()  # nothing was downloaded
    assert err.count("fa-shim: error:") == 1
    assert (
        "fa-shim: error: -C torch-abi=stable builds flash-attn 2.8.3.post2 on torch's stable ABI, "
        "for torch >= 2.10.0; this torch is 2.9.1+cu128." in err
    ), err[-3000:]
    assert (
        "fa-shim: fix: install torch >= 2.10.0, or build the per-torch wheel: -C torch-abi=torch"
        in err
    )
