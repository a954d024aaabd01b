"""Local version label, wheel tag and file name: computed with packaging, checked against it."""

from __future__ import annotations

import sys

import pytest
from packaging import tags
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from fa_backend import _metadata
from fa_backend._torch import TorchInfo


def _torch(version: str, cuda: str | None, abi: int) -> TorchInfo:
    return TorchInfo(
        version=version,
        cuda=cuda,
        abi=abi,
        cuda_home=None,
        package_dir="/t",
        cxx_std="c++17",
        python=sys.executable,
        isolated=False,
    )


@pytest.mark.parametrize(
    ("version", "cuda", "abi", "label"),
    [
        ("2.11.0+cu130", "13.0", 1, "cu130torch2.11cxx11abiTRUE"),
        ("2.9.1+cu128", "12.8", 1, "cu128torch2.9cxx11abiTRUE"),
        ("2.6.0+cu124", "12.4", 0, "cu124torch2.6cxx11abiFALSE"),
        ("2.13.0+cpu", None, 1, "cputorch2.13cxx11abiTRUE"),
    ],
)
def test_label_names_cuda_torch_and_abi(version, cuda, abi, label):
    assert _torch(version, cuda, abi).label == label
    full = _metadata.full_version("2.8.3", label)
    assert Version(full).public == "2.8.3"
    assert Version(full).local == label.lower()  # PEP 440 compares labels case-insensitively


def test_wheel_tag_is_this_interpreters_most_specific_plain_linux_tag():
    tag = _metadata.wheel_tag()
    assert tag in set(tags.sys_tags())
    assert tag.interpreter == f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert tag.abi == tag.interpreter  # never none/abi3: the module is compiled for this ABI
    assert tag.platform.startswith("linux_") and tag.platform in set(tags.platform_tags())
    # the first sys_tag on the plain platform is exactly ours
    assert next(t for t in tags.sys_tags() if t.platform == tag.platform) == tag


def test_wheel_filename_round_trips_through_packaging():
    version = _metadata.full_version("2.8.3", "cu130torch2.11cxx11abiTRUE")
    name = _metadata.wheel_filename(version, _metadata.wheel_tag())
    assert name.startswith("flash_attn-2.8.3+cu130torch2.11cxx11abiTRUE-cp")
    dist, parsed_version, _, parsed_tags = parse_wheel_filename(name)
    assert (dist, parsed_version, parsed_tags) == (
        "flash-attn",
        Version(version),
        frozenset({_metadata.wheel_tag()}),
    )


def test_core_metadata_is_upstreams_with_our_version(tmp_path):
    from conftest import SHARED_SDISTS

    pkg_info = _metadata.read_pkg_info(SHARED_SDISTS / "flash_attn-2.8.3.tar.gz")
    text = _metadata.core_metadata(pkg_info, "2.8.3+cu130torch2.11cxx11abiTRUE")
    header = text.split("\n\n")[0].splitlines()
    assert "Version: 2.8.3+cu130torch2.11cxx11abiTRUE" in header
    assert "Name: flash_attn" in header
    assert {"Requires-Dist: torch", "Requires-Dist: einops"} <= set(header)
    assert text.split("\n\n", 1)[1] == pkg_info.split("\n\n", 1)[1]  # description untouched
