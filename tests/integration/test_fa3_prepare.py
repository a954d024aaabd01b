"""Both FlashAttention-3 lines prepared for real (`python -m fa_backend prepare` in flash-attn-3/,
upstream's setup.py under torch 2.11.0+cu130 and nvcc 13.0 until torch has written build.ninja;
nothing compiled): which line each torch gets, the compile commands, the wheel's name, tag and
requirement, the provenance and the estimate. v2.8.3 builds its torch-bound flash_api.cpp (its
real build left CI when the stable line's replaced it, tests/test_fa3_build.py); main at
0251105a its stable one, checked by the commands, not assumed. doctor shows FA3's estimate, and
predicts a download of trees that are not here (an error only where the user set offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FA3_SHARED, PY, REPO, clean_env, run

from fa_backend.flavours.fa3 import _releases

pytestmark = pytest.mark.skipif(
    not Path("/usr/local/cuda-13.0/bin/nvcc").is_file() or not FA3_SHARED.is_dir(),
    reason="needs nvcc 13.0 in /usr/local/cuda-13.0 and the FA3 trees in ../shared/fa3",
)
NO_FEATURES = "fp8,split,paged-kv,appendkv,local,softcap,packgqa,varlen,cluster"
TAILORED = {"head-dims": "128", "dtypes": "bf16", "disable": NO_FEATURES}
LABEL = ".hdim128.bf16.nosplit.nopagedkv.noappendkv.nolocal.nosoftcap.nopackgqa.nofp8.novarlen"


def _prepare(python: Path, tmp: Path, **settings: str) -> dict:
    config = {"fa3-source-dir": str(FA3_SHARED), "compiler-cache": "none", **settings}
    options = [a for k, v in config.items() for a in ("-C", f"{k}={v}")]
    proc = run(
        [python, "-m", "fa_backend", "prepare", "--build-dir", tmp / "build", *options],
        cwd=REPO / "flash-attn-3",
        env=clean_env(PYTHONPATH=str(REPO), XDG_CACHE_HOME=str(tmp / "xdg")),
    )
    return {**json.loads(proc.stdout), "stderr": proc.stderr}


def _defines(command: dict, name: str) -> list[str]:
    return [a.split("=", 1)[1] for a in command["args"] if a.startswith(f"-D{name}=")]


@pytest.fixture(scope="module")
def v283(torch211_python, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("v283")
    return _prepare(torch211_python, tmp, **{"fa3-release": "v2.8.3", **TAILORED})


@pytest.fixture(scope="module")
def stable(torch211_python, tmp_path_factory) -> dict:
    return _prepare(torch211_python, tmp_path_factory.mktemp("stable"), **TAILORED)


@pytest.mark.cell(
    flavour="FA3 v2.8.3", torch="2.11.0+cu130", nvcc="13.0", abi="TRUE", stage="prepare"
)
def test_v2_8_3_builds_its_torch_bound_api_and_split_aggregate_units(v283):
    files = {Path(c["file"]).name: c for c in v283["compile_commands"]}
    # setup.py's hdimall/hdimdiff aggregates, compiled as the files they include that this set
    # keeps (release.toml forward-units = "split"): hdimdiff keeps none for head dim 128
    assert set(files) == {
        "flash_api.cpp",
        "flash_fwd_hdim128_bf16_sm90.cu",
        "flash_bwd_hdim128_bf16_sm90.cu",
        "flash_prepare_scheduler.cu",
    }
    api = files["flash_api.cpp"]
    assert not _defines(api, "TORCH_TARGET_VERSION")
    assert _defines(api, "_GLIBCXX_USE_CXX11_ABI")[-1] == "1"
    # upstream asks for 3.9's limited API; torch 2.11's cpp_extension adds 3.10's after it
    assert _defines(api, "Py_LIMITED_API") == ["0x03090000", "0x030A0000"]
    release = _releases.release("2.8.3")
    assert v283["wheel"] == (
        f"flash_attn_3-3.0.0b1+v2.8.3.cu130torch2.11cxx11abiTRUE{LABEL}.nocluster"
        "-cp310-abi3-linux_x86_64.whl"
    )
    prov = v283["provenance"]
    assert prov["torch"]["stable_abi"] is None
    assert prov["torch"]["binding"] == "torch 2.11.0 (its C++ ABI)"
    assert prov["fa3_sources"]["line"] == "2.8.3" and prov["fa3_sources"]["tag"] == "v2.8.3"
    assert prov["fa3_sources"]["hopper"]["pin"] == release.hopper_pin
    assert prov["fa3_sources"]["cutlass"]["pin"] == release.cutlass_pin
    assert prov["compile_commands"] == {"cxx": 1, "nvcc": 3}
    assert prov["kernel_set"]["switches"]["FLASH_ATTENTION_DISABLE_BACKWARD"] == "FALSE"
    assert {p["name"] for p in prov["patches"]} >= {"01-no-toolchain-download.patch"}
    assert "line 2.8.3 (flash-attention v2.8.3), from fa3-release=v2.8.3" in v283["stderr"]


def test_the_stable_line_is_the_default_and_its_commands_say_stable(stable):
    files = {Path(c["file"]).name: c for c in stable["compile_commands"]}
    assert set(files) == {
        "flash_api_stable.cpp",
        "flash_fwd_hdim128_bf16_sm90.cu",
        "flash_bwd_hdim128_bf16_sm90.cu",
        "flash_prepare_scheduler.cu",
    }
    api = files["flash_api_stable.cpp"]
    assert _defines(api, "TORCH_TARGET_VERSION") == ["0x0209000000000000"]
    assert _defines(api, "Py_LIMITED_API")[-1] == "0x030A0000"
    assert stable["wheel"] == (
        f"flash_attn_3-3.0.0+g0251105a.cu13.torch2.9plus{LABEL}.nocluster"
        "-cp310-abi3-linux_x86_64.whl"
    )
    torch = stable["provenance"]["torch"]
    assert torch["stable_abi"] == "2.9.0"
    assert torch["binding"] == "stable ABI, torch >= 2.9.0 (built with 2.11.0)"
    assert stable["provenance"]["fa3_sources"]["line"] == "main-0251105a"
    assert "line main-0251105a" in stable["stderr"] and "from fa3-release=auto" in stable["stderr"]
    # FA3 has an estimate before compiling, from its cost model
    assert stable["estimate"]["seconds"] and stable["estimate"]["sources"] == 4
    assert any("a per-source cost model" in line for line in stable["estimate"]["lines"])


def test_doctor_shows_flash_attn_3s_estimate(torch211_python, tmp_path):
    env = clean_env(
        XDG_CACHE_HOME=str(tmp_path),
        FA_SHIM_FA3_SOURCE_DIR=str(FA3_SHARED),
        FA_SHIM_HEAD_DIMS="128",
        FA_SHIM_DTYPES="bf16",
        FA_SHIM_DISABLE=NO_FEATURES,
    )
    proc = run(
        [PY, "-m", "fa_backend", "doctor", "--json", "--python", torch211_python],
        cwd=REPO / "flash-attn-3",
        check=False,
        env=env,
    )
    build = json.loads(proc.stdout)["build"]
    assert build["sources"] == 4 and build["estimate_s"], build
    assert build["wheel"].startswith("flash_attn_3-3.0.0+g0251105a.cu13.torch2.9plus.hdim128")


def test_doctor_predicts_that_a_build_downloads_flash_attn_3s_trees(torch211_python, tmp_path):
    def doctor(**env: str) -> dict:
        proc = run(
            [PY, "-m", "fa_backend", "doctor", "--json", "--python", torch211_python],
            cwd=REPO / "flash-attn-3",
            check=False,
            env=clean_env(XDG_CACHE_HOME=str(tmp_path), **env),
        )
        return json.loads(proc.stdout)

    report = doctor()  # no tree in the cache, no fa3-source-dir: a build would download them
    assert "hopper tree" in report["build"]["downloads"] and "stops" not in report["build"]
    assert report["problems"] == [], report["problems"]
    offline = doctor(FA_SHIM_OFFLINE="true")  # the user's own offline: a build would stop
    assert "downloading is off" in offline["build"]["stops"]
    assert [p["severity"] for p in offline["problems"]] == ["error"], offline["problems"]


@pytest.mark.parametrize("line", ["v2.8.3", "auto"])
def test_forward_variants_are_compiled_together_as_the_group_setting_says(
    torch211_python, tmp_path, line
):
    """Split and softcap left on for head dim 128 bf16: upstream's four forward files (plain,
    _split, _softcap, _split_softcap; v2.8.3's inside its aggregates) compiled as two units that
    include two each, with the build's own flags; the set, its label and the fingerprint's kernel
    set are those of upstream's cut; the provenance records the group size."""
    settings = {
        "head-dims": "128",
        "dtypes": "bf16",
        "disable": "fp8,paged-kv,appendkv,local,packgqa,cluster",
        "fa3-release": line,
    }
    apart = _prepare(torch211_python, tmp_path / "apart", **settings, **{"fa3-group": "1"})
    grouped = _prepare(torch211_python, tmp_path / "grouped", **settings, **{"fa3-group": "2"})
    forward = {
        Path(c["file"]).name: c
        for c in grouped["compile_commands"]
        if Path(c["file"]).name.startswith("flash_fwd_hdim")
    }
    assert set(forward) == {
        "flash_fwd_hdim128_bf16_group1of2x2_sm90.cu",
        "flash_fwd_hdim128_bf16_group2of2x2_sm90.cu",
    }
    members = {
        Path(c["file"]).name
        for c in apart["compile_commands"]
        if Path(c["file"]).name.startswith("flash_fwd_hdim")
    }
    assert len(members) == 4

    def flags(command: dict) -> list[str]:  # all but the source and the object, rooted alike
        args = [
            a.replace(str(tmp_path / "grouped"), str(tmp_path / "apart")) for a in command["args"]
        ]
        return [a for a in args if not a.endswith((".cu", ".o", ".o.d"))]

    plain = next(c for c in apart["compile_commands"] if c["file"].endswith("hdim128_bf16_sm90.cu"))
    included = []
    for command in forward.values():
        text = Path(command["file"]).read_text()
        included += [line.split('"')[1] for line in text.splitlines() if line.startswith("#incl")]
        assert flags(command) == flags(plain)  # upstream's rule and flags, unchanged
    assert sorted(included) == sorted(members)
    assert grouped["wheel"] == apart["wheel"]
    assert grouped["provenance"]["kernel_set"] == apart["provenance"]["kernel_set"]
    assert (grouped["provenance"]["group"], apart["provenance"]["group"]) == (2, 1)
    assert "up to 2 forward variants of a head dim in one unit" in grouped["stderr"]
