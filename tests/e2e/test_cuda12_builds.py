"""CUDA 12, compiled for real: the two CUDA 12 environments fa-shim was made for, built through
plain `pip wheel` with a real nvcc 12.4 (tests/cuda12_toolkit.py: Debian's compiler, the index's
cu12 headers, downloaded once per machine).

- torch 2.9.1+cu128 (the new C++ ABI), `-C cuda-archs=89` (the L4), nvcc named by CUDA_HOME:
  a minor mismatch (12.4 against torch's 12.8) that torch accepts and fa-shim logs as accepted;
- torch 2.6.0+cu124 (the old C++ ABI, _GLIBCXX_USE_CXX11_ABI=0), nvcc named by -C nvcc: fa-shim
  injects ABI 0 into every cxx and nvcc command, the provenance says so, the module imports
  with ABI 0. Built second, with the same fa-shim cache directory as a user's machine has, it
  compiles only flash_api.cpp: the kernel objects of the torch 2.9.1 build (the new ABI, naming
  no std::__cxx11 symbol) serve it from the object cache.

Each builds the smallest set that compiles real kernels (conftest.SMALLEST_REAL_SET: head dim 32,
bf16, forward only, upstream's five DISABLE switches: 4 kernels and flash_api.cpp), verifies,
carries its label and tags, and imports under its torch (no GPU here: import only).
FlashAttention-3's stable line is prepared with the same nvcc under torch 2.9.1 (upstream needs
CUDA 12.3 or newer). The FA2 stable line's floor, torch 2.10.0 (on the index a CUDA 12.8 build):
its stable wheel, built there with the same nvcc and the kernel objects of the torch 2.9.1
build (the binding alone compiled), imports under 2.10.0 and is refused under 2.9.1 by the
import guard, in one error naming the floor.
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import (
    FA3_SHARED,
    REPO,
    SHARED_SDISTS,
    SMALLEST_REAL_SET,
    clean_env,
    overlay_venv,
    run,
)

pytestmark = [pytest.mark.realbuild, pytest.mark.slow, pytest.mark.cuda_torch]

SET = ".hdim32.bf16.fwd.nodropout.noalibi.nosoftcap.nolocal.nounevenk"
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
IMPORT = (
    "import importlib.metadata as m, json, flash_attn, flash_attn_2_cuda, torch; "
    "print(json.dumps({'version': m.version('flash-attn'), 'torch': torch.__version__}))"
)


def _build(python: Path, tmp: Path, cache: Path, archs: str, env: dict, *options: str) -> dict:
    settings = {
        "sdist-dir": str(SHARED_SDISTS),
        **SMALLEST_REAL_SET,
        "cuda-archs": archs,
        "compiler-cache": "none",
        "cache-dir": str(cache),
    }
    config = [a for k, v in settings.items() for a in ("-C", f"{k}={v}")]
    proc = run(
        [python, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps",
         "-w", tmp / "dist", REPO, *config, *options],
        cwd=tmp,
        env=clean_env(XDG_CACHE_HOME=str(tmp / "xdg"), PIP_NO_CACHE_DIR="1", **env),
    )  # fmt: skip
    (wheel,) = (tmp / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith("fa_shim_provenance.json"))
        prov = json.loads(zf.read(name))
    # verify and import in a venv of its own over the torch venv (which stays untouched)
    venv, _ = overlay_venv(python, tmp / "venv")
    run([venv, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel])
    verify = run([venv, "-m", "fa_backend", "verify", "flash_attn"], cwd=REPO, env=clean_env())
    imported = run([venv, "-c", IMPORT], cwd=tmp, env=clean_env())
    return {
        "wheel": wheel,
        "log": " ".join((proc.stdout + proc.stderr).split()),
        "prov": prov,
        "verify": " ".join(verify.stdout.split()),
        "import": json.loads(imported.stdout.strip().splitlines()[-1]),
    }


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One fa-shim cache directory for both builds, as on a user's machine: its object cache."""
    return tmp_path_factory.mktemp("cuda12-cache")


@pytest.fixture(scope="module")
def torch291_build(torch291_python, cuda12_home, cache, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("cuda12-torch291")
    return _build(torch291_python, tmp, cache, "89", {"CUDA_HOME": str(cuda12_home)})


@pytest.fixture(scope="module")
def torch26_build(torch26_python, cuda12_home, cache, torch291_build, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("cuda12-torch26")
    nvcc = cuda12_home / "bin" / "nvcc"
    return _build(torch26_python, tmp, cache, "80", {}, "-C", f"nvcc={nvcc}")


def _check_nvcc(prov: dict) -> None:
    assert prov["nvcc"] == {"version": "12.4", "build": "12.4.131"}


def _check_build(build: dict, torch: str, label: str, abi: int, decision: str) -> dict:
    """What every CUDA 12 cell shows: the wheel's name, the toolkit decision (which nvcc, its CUDA
    against torch's, why it is accepted) in the log, nvcc 12.4 and torch's ABI in the
    provenance, what was compiled (as test_real_build.py: the 4 kernel sources whole, as fa-shim
    chooses on 2 cores, flash_api.cpp, sm_80 SASS in the module), verify's pass with that ABI,
    the import under that torch. The flags injected."""
    prov = build["prov"]
    assert build["wheel"].name == f"flash_attn-2.8.3.post2+{label}-{TAG}-{TAG}-linux_x86_64.whl"
    assert decision in build["log"]
    _check_nvcc(prov)
    assert prov["torch"]["version"] == torch and prov["torch"]["cxx11_abi"] == abi
    assert prov["tu_parts"] == 1
    assert prov["compile_commands"] == {"cxx": 1, "nvcc": 4}, prov["compile_commands"]
    assert prov["cuda_archs"] == ["80"]  # 89 (the L4) runs the sm_80 code
    assert "result: OK" in build["verify"], build["verify"]
    # "result: OK" also passes with "SKIP cuda archs" (a module without device code)
    assert re.search(r"PASS cuda archs [^()]*\bsm_80\b", build["verify"]), build["verify"]
    # the module's references to torch pass std::string in torch's ABI
    assert "PASS abi" in build["verify"]
    assert f"(_GLIBCXX_USE_CXX11_ABI={abi})" in build["verify"]
    assert build["import"]["version"] == f"2.8.3.post2+{label}"
    assert build["import"]["torch"] == torch
    return prov["injected_flags"][0]["injected"]


@pytest.mark.cell(
    flavour="FA2 2.8.3.post2", torch="2.9.1+cu128", nvcc="12.4", abi="TRUE", stage="compiled"
)
def test_torch_2_9_1_cu128_for_the_l4(torch291_build, cuda12_home):
    nvcc = cuda12_home / "bin" / "nvcc"
    injected = _check_build(
        torch291_build, "2.9.1+cu128", f"cu128torch2.9cxx11abiTRUE{SET}", 1,
        f"nvcc {nvcc} (CUDA 12.4) for torch 2.9.1+cu128 (CUDA 12.8): accepted, the same CUDA "
        "major (torch refuses only another major; for another minor its cpp_extension warns)",
    )  # fmt: skip
    assert f"using nvcc {nvcc} (CUDA 12.4, from CUDA_HOME)" in torch291_build["log"]
    assert "89 runs the sm_80 code" in torch291_build["log"]
    assert injected["cxx"][-1] == injected["nvcc"][-1] == "-D_GLIBCXX_USE_CXX11_ABI=1"


@pytest.mark.cell(
    flavour="FA2 2.8.3.post2", torch="2.6.0+cu124", nvcc="12.4", abi="FALSE", stage="compiled"
)
def test_torch_2_6_cu124_gets_abi_0_injected(torch26_build, cuda12_home):
    """torch 2.6 is built with the old C++ ABI: fa-shim injects 0 into every cxx and nvcc
    command, the provenance records it, and the module imports reporting ABI 0."""
    nvcc = cuda12_home / "bin" / "nvcc"
    injected = _check_build(
        torch26_build, "2.6.0+cu124", f"cu124torch2.6cxx11abiFALSE{SET}", 0,
        f"nvcc {nvcc} (CUDA 12.4) for torch 2.6.0+cu124 (CUDA 12.4): accepted, the same CUDA "
        "release",
    )  # fmt: skip
    assert f"using nvcc {nvcc} (CUDA 12.4, from setting nvcc)" in torch26_build["log"]
    assert injected["cxx"][-2:] == ["-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=0"]
    assert injected["nvcc"][-1] == "-D_GLIBCXX_USE_CXX11_ABI=0"
    # the kernels torch 2.9.1's build kept, linked under the old ABI: only the binding compiled
    assert (
        "4 kernel objects from the object cache (built under torch 2.9.1+cu128), "
        "compiling flash_api.cpp" in torch26_build["log"]
    ), torch26_build["log"][-3000:]


@pytest.fixture(scope="module")
def torch210_stable_build(
    torch210_python, cuda12_home, cache, torch291_build, tmp_path_factory
) -> dict:
    tmp = tmp_path_factory.mktemp("cuda12-torch210-stable")
    env = {"CUDA_HOME": str(cuda12_home)}
    return _build(torch210_python, tmp, cache, "89", env, "-C", "torch-abi=stable")


@pytest.mark.cell(
    flavour="FA2 2.8.3.post2, torch's stable ABI",
    torch="2.10.0+cu128",
    nvcc="12.4 (the kernels from the object cache, compiled under 2.9.1+cu128)",
    abi="stable ABI",
    stage="compiled",
)
def test_the_cuda_12_stable_wheel_at_the_floor_torch_2_10(torch210_stable_build):
    build = torch210_stable_build
    label = f"cu12.torch2.10plus{SET}"
    assert build["wheel"].name == f"flash_attn-2.8.3.post2+{label}-cp310-abi3-linux_x86_64.whl"
    assert (
        "4 kernel objects from the object cache (built under torch 2.9.1+cu128), "
        "compiling flash_api_stable.cpp" in build["log"]
    ), build["log"][-3000:]
    _check_nvcc(build["prov"])
    assert build["prov"]["torch"]["stable_abi"] == "2.10.0"
    assert "result: OK" in build["verify"] and "stable ABI (torch >= 2.10.0)" in build["verify"]
    assert build["import"] == {"version": f"2.8.3.post2+{label}", "torch": "2.10.0+cu128"}


def test_the_cuda_12_stable_wheel_is_refused_under_torch_2_9_1(
    torch210_stable_build, torch291_python, tmp_path
):
    """Below the floor the import guard stops the import: one ImportError naming the floor and
    the torch to install, before the module loads."""
    venv, _ = overlay_venv(torch291_python, tmp_path / "venv")
    wheel = torch210_stable_build["wheel"]
    run([venv, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel])
    proc = run([venv, "-c", "import flash_attn"], cwd=tmp_path, env=clean_env(), check=False)
    err = proc.stderr
    assert proc.returncode != 0 and err.count("ImportError: ") == 1, err[-3000:]
    assert "torch version 2.9.1+cu128 is older than 2.10.0, the oldest this stable-ABI" in err
    assert "Install a torch >= 2.10.0 built for CUDA 12, e.g.:" in err, err[-3000:]


FA3_NO_FEATURES = "fp8,split,paged-kv,appendkv,local,softcap,packgqa,varlen,cluster"


@pytest.mark.skipif(not FA3_SHARED.is_dir(), reason="needs the FA3 trees in ../shared/fa3")
@pytest.mark.cell(
    flavour="FA3 main-0251105a",
    torch="2.9.1+cu128",
    nvcc="12.4",
    abi="stable ABI",
    stage="prepare",
)
def test_fa3_stable_line_prepares_with_nvcc_12_4(torch291_python, cuda12_home, tmp_path):
    """Upstream's hopper/setup.py takes nvcc >= 12.3 (and would download nvcc 12.6 and ptxas
    12.8 for it, which fa-shim patches out): nvcc 12.4 prepares the stable line, the preflight
    compiling its probe with the build's exact nvcc command line, all for sm_90a."""
    config = {
        "fa3-source-dir": str(FA3_SHARED),
        "compiler-cache": "none",
        "head-dims": "128",
        "dtypes": "bf16",
        "disable": FA3_NO_FEATURES,
    }
    options = [a for k, v in config.items() for a in ("-C", f"{k}={v}")]
    proc = run(
        [torch291_python, "-m", "fa_backend", "prepare", "--build-dir", tmp_path / "b", *options],
        cwd=REPO / "flash-attn-3",
        env=clean_env(
            PYTHONPATH=str(REPO), XDG_CACHE_HOME=str(tmp_path / "xdg"), CUDA_HOME=str(cuda12_home)
        ),
    )
    summary = json.loads(proc.stdout)
    assert summary["wheel"].startswith("flash_attn_3-3.0.0+g0251105a.cu12.torch2.9plus.hdim128.")
    assert summary["wheel"].endswith("-cp39-abi3-linux_x86_64.whl")  # torch < 2.10: 3.9's API
    assert summary["provenance"]["nvcc"]["version"] == "12.4"
    nvcc = [c for c in summary["compile_commands"] if c["kind"] == "nvcc"]
    assert nvcc and all("arch=compute_90a,code=sm_90a" in c["args"] for c in nvcc)
    log = " ".join(proc.stderr.split())
    assert "(CUDA 12.4) for torch 2.9.1+cu128 (CUDA 12.8): accepted, the same CUDA major" in log
