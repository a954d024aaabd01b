"""What the FA3 flavour refuses before and after prepare (flavours/fa3/_flavour.py,
_trees.py), on plans and commands made here: a stable line under a torch below its floor,
FA2's version setting, a setup.py that does not say what the registry claims, and a build.ninja
whose units differ from the planned ones (the torch-bound API instead of the stable one)."""

from __future__ import annotations

import pytest
from conftest import REPO
from packaging import tags

from fa_backend.core._errors import FaShimError
from fa_backend.flavours import _registry
from fa_backend.flavours._interface import Plan, Tools
from fa_backend.flavours.fa3 import _flavour, _releases, _trees, _units
from fa_backend.settings import _settings
from fa_backend.toolchain._compile_commands import Command
from fa_backend.toolchain._torch import TorchInfo

FA3 = _flavour.FLAVOUR
STABLE = _releases.release("main-0251105a")
MAIN = (
    "BACKWARD", "SPLIT", "PAGEDKV", "APPENDKV", "LOCAL", "SOFTCAP", "PACKGQA", "FP16", "FP8",
    "VARLEN", "CLUSTER", "HDIM64", "HDIM96", "HDIM128", "HDIM192", "HDIM256", "SM80",
    "HDIMDIFF64", "HDIMDIFF192",
)  # fmt: skip
NO_FEATURES = "fp8,split,paged-kv,appendkv,local,softcap,packgqa,varlen,cluster"
PROJECT = REPO / "flash-attn-3"  # its [tool.fa-shim], not the root's flash-attn-version


def _load(config: dict) -> _settings.Settings:
    return _registry.load_settings(config, environ={}, project_dir=PROJECT)


def _torch(version: str, cuda: str = "12.8") -> TorchInfo:
    return TorchInfo(version, cuda, 1, None, "/venv/torch", "c++17", "python", False)


def test_a_stable_line_under_an_older_torch_is_refused():
    settings = _load({"fa3-release": "main-0251105a"})
    with pytest.raises(FaShimError) as info:
        FA3.plan(settings, _torch("2.8.0+cu128"))
    assert "against torch's stable ABI, for torch >= 2.9.0; this torch is 2.8.0+cu128" in (
        info.value.cause
    )
    assert "-C fa3-release=auto" in info.value.fix


def test_a_setup_py_that_does_not_target_the_registrys_floor_is_refused():
    setup = 'api = "flash_api_stable.cpp"\nargs = ["-DTORCH_TARGET_VERSION=0x020A000000000000"]'
    with pytest.raises(FaShimError) as info:
        _trees.check_stable_claim(STABLE, setup)
    assert "says torch's stable ABI from torch 2.9.0" in info.value.cause
    assert "with TORCH_TARGET_VERSION 2.10.0" in info.value.cause
    _trees.check_stable_claim(STABLE, setup.replace("0x020A", "0x0209"))


def _plan() -> Plan:
    settings = _load({"head-dims": "128", "dtypes": "bf16", "disable": NO_FEATURES})
    tailoring = _units.tailoring(settings, MAIN)
    source = _flavour.Fa3Source(STABLE, None, tailoring)
    tag = tags.Tag("cp310", "abi3", "linux_x86_64")
    return Plan(settings, _torch("2.11.0", "13.0"), FA3, source, (), "3.0.0", tag, "", "2.9.0")


def _nvcc(name: str, *codes: str) -> Command:
    gencodes = [a for code in codes for a in ("-gencode", f"arch=compute_{code},code=sm_{code}")]
    return Command("nvcc", f"/src/hopper/instantiations/{name}", ("nvcc", *gencodes))


def _commands(api: str) -> list[Command]:
    return [
        Command("cxx", f"/src/hopper/{api}", ("c++",)),
        _nvcc("flash_fwd_hdim128_bf16_sm90.cu", "90a"),
        _nvcc("flash_bwd_hdim128_bf16_sm90.cu", "90a"),
        _nvcc("../flash_prepare_scheduler.cu", "80", "90a"),
    ]


def test_the_planned_units_are_checked_against_build_ninja():
    tools = Tools(None, None, 2, 1, None)
    FA3.check(_plan(), tools, _commands("flash_api_stable.cpp"))
    with pytest.raises(FaShimError) as info:
        FA3.check(_plan(), tools, _commands("flash_api.cpp"))
    assert "flash_api.cpp: compiled, not planned" in info.value.details
    assert "flash_api_stable.cpp: planned, not compiled" in info.value.details
    extra = [*_commands("flash_api_stable.cpp"), _nvcc("flash_fwd_hdim64_256_bf16_sm90.cu", "90a")]
    with pytest.raises(FaShimError) as info:
        FA3.check(_plan(), tools, extra)
    assert "flash_fwd_hdim64_256_bf16_sm90.cu: head dim 64 is left out" in info.value.details


def test_an_architecture_other_than_hopper_is_refused_before_nvcc_is_asked():
    settings = _load({"cuda-archs": "80,90"})
    with pytest.raises(FaShimError) as caught:
        FA3.archs(settings, _torch("2.9.0"), REPO / "no-nvcc-here")
    assert caught.value.cause == (
        "setting cuda-archs asks for 80: FlashAttention-3 is built for Hopper (sm_90a) only."
    )
    assert "-C cuda-archs=90a" in caught.value.fix
