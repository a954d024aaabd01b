"""The compile commands of a stable-ABI build say so (toolchain/_compile_commands.py): every C++
command defines TORCH_TARGET_VERSION last, to the plan's floor; every command's Py_LIMITED_API
is the one the abi3 tag says."""

from __future__ import annotations

from pathlib import Path

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.toolchain import _compile_commands
from fa_backend.toolchain._compile_commands import Command

NINJA = Path("build.ninja")
STABLE_CXX = Command(
    "cxx",
    "hopper/flash_api_stable.cpp",
    (
        "c++", "-DPy_LIMITED_API=0x03090000", "-DTORCH_TARGET_VERSION=0x0209000000000000",
        "-DPy_LIMITED_API=0x030A0000", "-c", "flash_api_stable.cpp",
    ),
)  # fmt: skip
KERNEL = Command("nvcc", "hopper/k_sm90.cu", ("nvcc", "-DPy_LIMITED_API=0x030A0000"))


@pytest.mark.parametrize(
    "value, version",
    [("0x0209000000000000", "2.9.0"), ("0x020A010000000000ULL", "2.10.1"), ("two", None)],
)
def test_target_version(value, version):
    assert _compile_commands.target_version(value) == version


def test_a_stable_build_defines_its_target_last():
    _compile_commands.verify_stable_target([STABLE_CXX, KERNEL], "2.9.0", NINJA)
    with pytest.raises(FaShimError) as info:
        _compile_commands.verify_stable_target([STABLE_CXX, KERNEL], "2.10.0", NINJA)
    assert "0x0209000000000000 (torch 2.9.0)" in info.value.details
    bound = Command("cxx", "hopper/flash_api.cpp", ("c++", "-c", "flash_api.cpp"))
    with pytest.raises(FaShimError) as info:
        _compile_commands.verify_stable_target([bound, KERNEL], "2.9.0", NINJA)
    assert "hopper/flash_api.cpp: no define" in info.value.details
    assert "1 of 1 C++ commands do not define -DTORCH_TARGET_VERSION=2.9.0" in info.value.cause


def test_the_limited_api_is_the_tags():
    _compile_commands.verify_limited_api([STABLE_CXX, KERNEL], "cp310", NINJA)
    with pytest.raises(FaShimError, match="Py_LIMITED_API 0x030A0000, but its wheel tag is cp39"):
        _compile_commands.verify_limited_api([STABLE_CXX, KERNEL], "cp39", NINJA)
