"""FlashAttention-3 for real on a CPU box: pip builds flash-attn-3/ through fa-shim from the
pinned hopper and CUTLASS trees, tailored to bf16, head dim 128, forward + backward, with every
FA3 feature switch off: 4 CUDA units for sm_90a plus flash_api.cpp. The wheel goes into a
throwaway environment layered over the session's CUDA 13.0 torch 2.11 venv. Then: its name and
cp39-abi3 tag, its provenance (both content pins), `python -m fa_backend verify flash_attn_3`,
and the import through fa-shim's guard (transformers' flash_attention_3 imports
flash_attn_interface) with the module's ops registered. What the set left out cannot be called
without a GPU (upstream's mha_fwd asks for the device's properties first): bench/fa3_refusals.py
calls each on the H100 (docs/benchmarks.md).

The trees come from ../shared/fa3 or GitHub (fa-shim's download); without either it skips.
The same build on the H100 and its timings are in docs/benchmarks.md."""

from __future__ import annotations

import json
import re

import pytest
from conftest import FA3_SHARED, PY, REPO, clean_env, overlay_venv, run
from packaging.version import Version

pytestmark = [pytest.mark.realbuild, pytest.mark.slow]

FEATURES = "fp8,split,paged-kv,appendkv,local,softcap,packgqa,varlen,cluster"
LABEL = (
    "v2.8.3.cu130torch2.11cxx11abiTRUE.hdim128.bf16.nosplit.nopagedkv.noappendkv.nolocal"
    ".nosoftcap.nopackgqa.nofp8.novarlen.nocluster"
)
VERSION = f"3.0.0b1+{LABEL}"
UNITS = {
    "flash_api.cpp",
    "flash_fwd_hdimall_bf16_sm90.cu",
    "flash_fwd_hdimdiff_bf16_sm90.cu",
    "flash_bwd_hdim128_bf16_sm90.cu",
    "flash_prepare_scheduler.cu",
}


@pytest.fixture(scope="module")
def fa3_installed(torch211_python, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fa3-build")
    python, site = overlay_venv(torch211_python, tmp / "venv")
    settings = {
        "head-dims": "128",
        "dtypes": "bf16",
        "disable": FEATURES,
        "cache-dir": str(tmp / "fa-shim-cache"),
        "compiler-cache": "none",
        "max-jobs": "2",
        "nvcc-threads": "1",
    }
    if FA3_SHARED.is_dir():  # seeds only: without it fa-shim downloads the trees (pinned)
        settings["fa3-source-dir"] = str(FA3_SHARED)
    options = [a for k, v in settings.items() for a in ("-C", f"{k}={v}")]
    scratch = tmp / "tmp"
    scratch.mkdir()
    proc = run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-v",
            "--no-build-isolation",
            "--no-index",
            "--no-deps",
            REPO / "flash-attn-3",
            *options,
        ],
        cwd=tmp,
        check=False,
        env=clean_env(PIP_NO_CACHE_DIR="1", TMPDIR=str(scratch)),
    )
    if proc.returncode and "github.com" in proc.stdout + proc.stderr and not FA3_SHARED.is_dir():
        pytest.skip("the FA3 trees are neither in ../shared/fa3 nor reachable on GitHub here")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (dist_info,) = site.glob("flash_attn_3-*.dist-info")
    return python, site, dist_info, proc, tmp


def test_the_wheel_is_cp39_abi3_with_the_label(fa3_installed):
    _, _, dist_info, proc, _ = fa3_installed
    created = re.search(r"Created wheel for flash-attn-3: filename=(\S+)", proc.stdout)
    assert created, proc.stdout[-3000:]
    assert created.group(1) == f"flash_attn_3-{VERSION}-cp39-abi3-linux_x86_64.whl"
    assert "Tag: cp39-abi3-linux_x86_64\n" in (dist_info / "WHEEL").read_text()
    metadata = (dist_info / "METADATA").read_text()
    assert Version(re.search(r"^Version: (\S+)$", metadata, re.M).group(1)) == Version(VERSION)
    assert "Requires-Dist: torch==2.11.0" in metadata
    record = (dist_info / "RECORD").read_text()
    for name in (
        "flash_attn_3/_C.abi3.so",
        "flash_attn_3/_fa_shim_guard.py",
        "flash_attn_interface.py",
    ):
        assert f"{name}," in record


def test_provenance_pins_both_trees_and_names_what_was_compiled(fa3_installed):
    _, _, dist_info, proc, _ = fa3_installed
    prov = json.loads((dist_info / "fa_shim_provenance.json").read_text())
    from fa_backend.flavours.fa3 import _releases as _fa3_releases

    release = _fa3_releases.release("2.8.3")
    assert prov["distribution"] == "flash-attn-3"
    assert prov["fa3_sources"]["hopper"]["pin"] == release.hopper_pin
    assert prov["fa3_sources"]["cutlass"]["pin"] == release.cutlass_pin
    assert prov["fa3_sources"]["cutlass"]["commit"] == release.cutlass_commit
    assert prov["torch"]["cxx11_abi"] == 1 and prov["torch"]["cuda"] == "13.0"
    # kernels for sm_90a; the scheduler unit for sm_80 too, as upstream's rule has it
    assert prov["cuda_archs"] == ["80", "90a"]
    assert prov["kernel_set"]["switches"]["FLASH_ATTENTION_DISABLE_BACKWARD"] == "FALSE"
    assert prov["compile_commands"] == {"cxx": 1, "nvcc": len(UNITS) - 1}
    for injected in prov["injected_flags"][0]["injected"].values():
        assert "-D_GLIBCXX_USE_CXX11_ABI=1" in injected
    assert {p["name"] for p in prov["patches"]} >= {
        "01-no-toolchain-download.patch",
        "05-import-guard.patch",
        "06-headdim-dispatch.patch",
    }
    compiled = set(re.findall(r"\b(flash_\w+\.cu|flash_api\.cpp)\b", proc.stdout + proc.stderr))
    assert compiled <= UNITS and {"flash_bwd_hdim128_bf16_sm90.cu"} <= compiled


def test_verify_against_another_torch_names_flash_attn_3(fa3_installed):
    """The same wheel against this interpreter's CPU torch fails, and every fix names the
    flash-attn-3 project (its flavour, read from the installed distribution)."""
    _, site, _, _, _ = fa3_installed
    proc = run([PY, "-m", "fa_backend", "verify", site, "--json"], check=False, env=clean_env())
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and not report["ok"], proc.stdout
    fixes = [c["fix"] for c in report["checks"] if c["status"] == "fail"]
    assert fixes and all("flash-attn-3" in fix for fix in fixes), fixes
    rebuild = [fix for fix in fixes if "pip install" in fix]
    assert rebuild and all(str(REPO / "flash-attn-3") in fix for fix in rebuild), rebuild


def test_verify_and_import_through_the_guard(fa3_installed):
    python, _, _, _, tmp = fa3_installed
    verify = run(
        [python, "-m", "fa_backend", "verify", "flash_attn_3"],
        cwd=REPO,
        check=False,
        env=clean_env(),
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "sm_90a" in verify.stdout and "cp39-abi3" in verify.stdout
    code = (
        "import torch, flash_attn_interface as f\n"
        "print(f.__file__)\n"
        "print(hasattr(torch.ops.flash_attn_3, 'fwd'))\n"
    )
    out = run([python, "-c", code], cwd=tmp, env=clean_env()).stdout.split()
    assert out[0].startswith(str(tmp / "venv")) and out[1] == "True"
