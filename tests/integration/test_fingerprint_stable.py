"""The wheel cache's fingerprint (pipeline/_provenance.py) of a stable-ABI build leaves the torch
release out and keeps its floor and CUDA major: a build under torch 2.11.0 is a hit for 2.14.1,
a miss for a CUDA 12 torch; a torch-bound build keeps the release. (The real wheel, built under
2.11.0 and installed from the cache under 2.14.1: tests/e2e/test_fa3_build.py.)"""

from __future__ import annotations

import types

import pytest

from fa_backend.flavours._interface import Tools
from fa_backend.pipeline import _provenance
from fa_backend.toolchain._torch import TorchInfo


def _torch(version: str, cuda: str, abi: int = 1, std: str = "c++17") -> TorchInfo:
    return TorchInfo(version, cuda, abi, None, "/venv/torch", std, "python", False)


def _plan(torch: TorchInfo, stable_abi: str | None) -> types.SimpleNamespace:
    flavour = types.SimpleNamespace(sources=lambda plan, with_origin: {"pin": "c85835f7"})
    return types.SimpleNamespace(
        wheel_name="flash_attn_3-3.0.0+g0251105a.cu13.torch2.9plus-cp310-abi3-linux_x86_64.whl",
        metadata="Requires-Dist: torch>=2.9\n",
        flavour=flavour,
        patches=(),
        torch=torch,
        kernel_set={"label": "hdim128"},
        stable_abi=stable_abi,
    )


TOOLS = Tools(None, None, 2, None, None)
T211 = _torch("2.11.0+cu130", "13.0")
T2141 = _torch("2.14.1+cu130", "13.0", std="c++20")  # C++20 headers: no C++ type crosses
T291_CU128 = _torch("2.9.1+cu128", "12.8")


def _key(torch: TorchInfo, stable_abi: str | None) -> dict:
    return _provenance.fingerprint(_plan(torch, stable_abi), TOOLS)


def test_a_stable_build_serves_every_torch_of_its_cuda_major():
    assert _key(T211, "2.9.0") == _key(T2141, "2.9.0")
    assert _key(T211, "2.9.0")["torch"] == ["stable-abi", "2.9.0", 13]
    assert _key(T211, "2.9.0") != _key(T291_CU128, "2.9.0")  # CUDA 12: another libcudart


@pytest.mark.parametrize("other", [T2141, T291_CU128])
def test_a_torch_bound_build_serves_its_release_only(other):
    assert _key(T211, None) != _key(other, None)
