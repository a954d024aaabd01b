"""FlashAttention-3 for real on a CPU box, the line a torch >= 2.9 gets by default (upstream main at
0251105a, built against torch's stable ABI): pip builds flash-attn-3/ through fa-shim under torch
2.11.0+cu130 from the pinned hopper and CUTLASS trees, tailored to bf16, head dim 128, forward +
backward, every FA3 feature switch off: 3 CUDA units for sm_90a plus flash_api_stable.cpp, the
suite's one real FA3 build (v2.8.3's line keeps prepare-level tests:
tests/integration/test_fa3_prepare.py, test_fa3_patches.py, test_fa3_sources.py).

Then the same wheel, once built:
- under torch 2.11.0: its name, cp310-abi3 tag, `torch>=2.9` requirement and label, provenance,
  `verify` and the import through fa-shim's guard with the module's ops registered;
- beside torch 2.14.1+cu130 and 2.15.0+cu132: `pip install ./flash-attn-3` there is a wheel-cache
  hit (the same wheel, nothing compiled), it verifies against that torch's libraries (every
  torch symbol one of its declared C shim functions) and imports;
- against a CUDA 12 torch (the session's torch 2.6.0+cu124, which CI makes anyway for the ABI
  tests): refused by verify (libcudart.so.13 against CUDA 12, and the floor) and by the guard at
  import, each naming the fix.
What the set left out cannot be called without a GPU: bench/fa3_stable_device.sh (H100).

The trees come from ../shared/fa3 or GitHub (fa-shim's download); without either the build fails
(no skip: it is the FA3 "compiled" cell of docs/reference/versions.md)."""

from __future__ import annotations

import json
import re
import time

import pytest
from conftest import FA3_SHARED, PY, REPO, clean_env, overlay_venv, run
from packaging.version import Version

pytestmark = [pytest.mark.realbuild, pytest.mark.slow]

FEATURES = "fp8,split,paged-kv,appendkv,local,softcap,packgqa,varlen,cluster"
LABEL = (
    "g0251105a.cu13.torch2.9plus.hdim128.bf16.nosplit.nopagedkv.noappendkv.nolocal.nosoftcap"
    ".nopackgqa.nofp8.novarlen.nocluster"
)
VERSION = f"3.0.0+{LABEL}"
WHEEL = f"flash_attn_3-{VERSION}-cp310-abi3-linux_x86_64.whl"
UNITS = {
    "flash_api_stable.cpp",
    "flash_fwd_hdim128_bf16_sm90.cu",
    "flash_bwd_hdim128_bf16_sm90.cu",
    "flash_prepare_scheduler.cu",
}
IMPORT = (
    "import torch, flash_attn_interface as f\n"
    "print(torch.__version__, f.__file__)\n"
    "print(hasattr(torch.ops.flash_attn_3, 'fwd'), hasattr(torch.ops.flash_attn_3, 'bwd'))\n"
)


def _install(python, tmp, shared_cache, **extra):
    settings = {
        "head-dims": "128",
        "dtypes": "bf16",
        "disable": FEATURES,
        "cache-dir": str(tmp / "fa-shim-cache"),
        "wheel-cache-dir": str(shared_cache),  # shared by both torches' installs
        "compiler-cache": "none",
        "max-jobs": "2",
        "nvcc-threads": "1",
        **extra,
    }
    if FA3_SHARED.is_dir():  # seeds only: without it fa-shim downloads the trees (pinned)
        settings["fa3-source-dir"] = str(FA3_SHARED)
    options = [a for k, v in settings.items() for a in ("-C", f"{k}={v}")]
    (tmp / "tmp").mkdir(exist_ok=True)
    pip = [python, "-m", "pip", "install", "-v", "--no-build-isolation", "--no-index", "--no-deps"]
    return run(
        [*pip, REPO / "flash-attn-3", *options],
        cwd=tmp,
        check=False,
        env=clean_env(PIP_NO_CACHE_DIR="1", TMPDIR=str(tmp / "tmp")),
    )


@pytest.fixture(scope="module")
def wheel_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("fa3-wheel-cache")


@pytest.fixture(scope="module")
def fa3_installed(torch211_python, wheel_cache, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fa3-build")
    python, site = overlay_venv(torch211_python, tmp / "venv")
    started = time.monotonic()
    proc = _install(python, tmp, wheel_cache)
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    print(f"the tailored stable FA3 set: pip install in {seconds:.0f} s")
    (dist_info,) = site.glob("flash_attn_3-*.dist-info")
    (wheel,) = (w for w in wheel_cache.glob("*/" + WHEEL) if (w.parent / "entry.json").is_file())
    return python, site, dist_info, proc, tmp, wheel


def test_the_wheel_is_cp310_abi3_requires_torch_2_9_and_claims_no_torch_release(fa3_installed):
    _, _, dist_info, proc, _, _ = fa3_installed
    created = re.search(r"Created wheel for flash-attn-3: filename=(\S+)", proc.stdout)
    assert created and created.group(1) == WHEEL, proc.stdout[-3000:]
    # torch 2.11's cpp_extension compiles py_limited_api modules with 3.10's limited API
    assert "Tag: cp310-abi3-linux_x86_64\n" in (dist_info / "WHEEL").read_text()
    metadata = (dist_info / "METADATA").read_text().splitlines()
    assert Version(next(m for m in metadata if m.startswith("Version: "))[9:]) == Version(VERSION)
    assert "Requires-Dist: torch>=2.9" in metadata and not any("torch==" in m for m in metadata)
    assert "Requires-Python: >=3.10" in metadata
    record = (dist_info / "RECORD").read_text()
    for name in (
        "flash_attn_3/_C.abi3.so",
        "flash_attn_3/_fa_shim_guard.py",
        "flash_attn_interface.py",
        "flash_attn_config.py",  # new at this line: the interface reads the compiled set there
    ):
        assert f"{name}," in record


def test_provenance_records_the_stable_abi_and_both_pins(fa3_installed):
    _, _, dist_info, proc, _, _ = fa3_installed
    prov = json.loads((dist_info / "fa_shim_provenance.json").read_text())
    from fa_backend.flavours.fa3 import _releases

    line = _releases.release("main-0251105a")
    assert prov["torch"]["binding"] == "stable ABI, torch >= 2.9.0 (built with 2.11.0)"
    assert prov["torch"]["stable_abi"] == "2.9.0" and prov["torch"]["cuda"] == "13.0"
    assert prov["flash_attn_version"] == "main-0251105a"
    # where the trees were found is the cache entry's record, not the wheel's (reproducible bytes)
    assert prov["fa3_sources"]["hopper"] == {"commit": line.commit, "pin": line.hopper_pin}
    assert prov["fa3_sources"]["cutlass"]["pin"] == line.cutlass_pin
    assert prov["cuda_archs"] == ["80", "90a"]  # the scheduler unit for sm_80 too (upstream)
    assert prov["compile_commands"] == {"cxx": 1, "nvcc": len(UNITS) - 1}
    assert {p["name"] for p in prov["patches"]} >= {
        "01-no-toolchain-download.patch",
        "05-import-guard.patch",
        "06-headdim-dispatch.patch",
    }
    compiled = set(re.findall(r"\b(flash_\w+\.cu|flash_api\w*\.cpp)\b", proc.stdout + proc.stderr))
    assert compiled <= UNITS and {"flash_bwd_hdim128_bf16_sm90.cu"} <= compiled


def _verify(python, target, *, cwd=REPO):
    proc = run(
        [python, "-m", "fa_backend", "verify", target, "--json"],
        cwd=cwd,
        check=False,
        env=clean_env(PYTHONPATH=str(REPO)),
    )
    return proc.returncode, json.loads(proc.stdout)


def _check(report, name):
    return next(c for c in report["checks"] if c["name"] == name)


@pytest.mark.cell(
    flavour="FA3 main-0251105a",
    torch="2.11.0+cu130",
    nvcc="13.0",
    abi="stable ABI",
    stage="compiled",
)
def test_verify_and_import_under_the_build_torch(fa3_installed):
    python, _, _, _, tmp, _ = fa3_installed
    code, report = _verify(python, "flash_attn_3")
    assert code == 0, report
    assert _check(report, "symbols")["summary"].startswith("stable ABI (torch >= 2.9.0)")
    out = run([python, "-c", IMPORT], cwd=tmp, env=clean_env()).stdout.split()
    assert out[0] == "2.11.0+cu130" and out[1].startswith(str(tmp / "venv"))
    assert out[2:] == ["True", "True"]


def _served_from_the_wheel_cache(fa3_installed, base, wheel_cache, tmp_path, torch_version):
    """`pip install ./flash-attn-3` beside another torch finds the wheel the 2.11.0 build stored
    (the fingerprint leaves the torch release out), compiles nothing, and the module verifies
    against that torch's own libraries and headers, and imports. The cache's view of it is
    stable-cu13-torch2.9plus/, no torch's own."""
    _, _, built_info, _, _, wheel = fa3_installed
    python, site = overlay_venv(base, tmp_path / "venv")
    proc = _install(python, tmp_path, wheel_cache)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    output = proc.stdout + proc.stderr
    assert f"building against torch {torch_version}" in output
    assert f"wheel cache hit: {wheel}" in output
    assert "running upstream setup.py" not in output  # nothing prepared, nothing compiled
    # its view is named for the torches it serves, not for either that installed it
    assert "teammates with torch >= 2.9.0 of CUDA 13 install it with" in output
    # once in the kernel set's directory, once in its arch set's below it (two arch
    # builds never collide, fleet/_wheel_cache)
    views = sorted(wheel_cache.glob(f"stable-cu13-torch2.9plus/**/{WHEEL}"))
    assert len(views) == 2 and views[-1].parent.name.startswith("sm"), views  # sm80_sm90a
    assert not list(wheel_cache.glob(f"torch-*/**/{WHEEL}"))
    (dist_info,) = site.glob("flash_attn_3-*.dist-info")
    assert (dist_info / "RECORD").read_text() == (built_info / "RECORD").read_text()
    code, report = _verify(python, "flash_attn_3")
    assert code == 0, report
    assert report["torch"]["version"] == torch_version
    symbols = _check(report, "symbols")["summary"]
    assert f"C shim function torch {torch_version}'s headers declare" in symbols
    assert "no C++ symbol of torch" in symbols
    provenance = _check(report, "provenance")["summary"]
    assert "torch >= 2.9.0 of CUDA 13 (torch's stable ABI; built with torch 2.11.0" in provenance
    out = run([python, "-c", IMPORT], cwd=tmp_path, env=clean_env()).stdout.split()
    assert out[0] == torch_version and out[2:] == ["True", "True"]


def test_the_same_wheel_serves_torch_2_14_from_the_wheel_cache(
    fa3_installed, torch2141_python, wheel_cache, tmp_path
):
    """A torch upgrade."""
    _served_from_the_wheel_cache(
        fa3_installed, torch2141_python, wheel_cache, tmp_path, "2.14.1+cu130"
    )


@pytest.mark.cell(
    flavour="FA3 main-0251105a",
    torch="2.15.0+cu132",
    nvcc="13.0 (the wheel built under torch 2.11.0+cu130, from the wheel cache)",
    abi="stable ABI",
    stage="imported",
)
def test_the_same_wheel_serves_torch_2_15_from_the_wheel_cache(
    fa3_installed, torch215_python, wheel_cache, tmp_path
):
    """A torch released after the wheel was built (CUDA 13.2: the machine's nvcc 13.0 is of
    its major, so the fingerprint is the 2.11.0 build's)."""
    _served_from_the_wheel_cache(
        fa3_installed, torch215_python, wheel_cache, tmp_path, "2.15.0+cu132"
    )


def test_a_cuda_12_torch_is_refused_by_verify_and_the_guard(
    fa3_installed, torch26_python, tmp_path
):
    """libcudart.so.13 cannot be torch's CUDA 12 runtime (the loader may still find a system
    libcudart.so.13, so the majors are compared, not left to the import)."""
    _, _, _, _, _, wheel = fa3_installed
    code, report = _verify(torch26_python, wheel)
    assert code == 1 and not report["ok"]
    runtime = _check(report, "cuda runtime")
    assert runtime["status"] == "fail" and "libcudart.so.13 (CUDA 13)" in runtime["summary"]
    assert f"uses CUDA {report['torch']['cuda']}" in runtime["summary"]
    provenance = _check(report, "provenance")
    assert (
        provenance["status"] == "fail"
        and "CUDA 13.0 (installed torch: 12." in (provenance["summary"])
    )
    assert all("flash-attn-3" in c["fix"] for c in report["checks"] if c["status"] == "fail")
    python, _ = overlay_venv(torch26_python, tmp_path / "venv")
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel], env=clean_env())
    proc = run([python, "-c", "import flash_attn_interface"], check=False, env=clean_env())
    assert proc.returncode == 1
    assert "built for:  torch >= 2.9.0 of CUDA 13 (torch's stable ABI" in proc.stderr
    assert "(the major version must match)" in proc.stderr
    assert "Install a torch >= 2.9.0 built for CUDA 13" in proc.stderr


def test_verify_against_a_cpu_torch_names_flash_attn_3(fa3_installed):
    """The same wheel against this interpreter's CPU torch fails, and every fix names the
    flash-attn-3 project (its flavour, read from the installed distribution)."""
    _, site, _, _, _, _ = fa3_installed
    proc = run([PY, "-m", "fa_backend", "verify", site, "--json"], check=False, env=clean_env())
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and not report["ok"], proc.stdout
    fixes = [c["fix"] for c in report["checks"] if c["status"] == "fail"]
    assert fixes and all("flash-attn-3" in fix for fix in fixes), fixes
    rebuild = [fix for fix in fixes if "pip install" in fix]
    assert rebuild and all(str(REPO / "flash-attn-3") in fix for fix in rebuild), rebuild
