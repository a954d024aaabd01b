"""Local version label, wheel tag and file name: computed with packaging, checked against it."""

from __future__ import annotations

import sys

import pytest
from packaging import tags
from packaging.metadata import Metadata
from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from fa_backend.flavours.fa2._flavour import FLAVOUR
from fa_backend.toolchain._torch import TorchInfo
from fa_backend.wheel import _metadata

FA2 = FLAVOUR.names


def _torch(version: str, cuda: str | None, abi: int) -> TorchInfo:
    return TorchInfo(
        version=version,
        cuda=cuda,
        abi=abi,
        cuda_home=None,
        package_dir="/t",
        cxx_std="c++17",
        python=sys.executable,
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
    tag = _metadata.wheel_tag(FA2)
    assert tag in set(tags.sys_tags())
    assert tag.interpreter == f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert tag.abi == tag.interpreter  # never none/abi3: the module is compiled for this ABI
    assert tag.platform.startswith("linux_") and tag.platform in set(tags.platform_tags())
    # the first sys_tag on the plain platform is exactly ours
    assert next(t for t in tags.sys_tags() if t.platform == tag.platform) == tag


def test_wheel_filename_round_trips_through_packaging():
    version = _metadata.full_version("2.8.3", "cu130torch2.11cxx11abiTRUE")
    name = _metadata.wheel_filename(version, _metadata.wheel_tag(FA2), FA2)
    assert name.startswith("flash_attn-2.8.3+cu130torch2.11cxx11abiTRUE-cp")
    dist, parsed_version, _, parsed_tags = parse_wheel_filename(name)
    assert (dist, parsed_version, parsed_tags) == (
        "flash-attn",
        Version(version),
        frozenset({_metadata.wheel_tag(FA2)}),
    )


def test_core_metadata_is_upstreams_with_our_version_and_torch(tmp_path):
    from conftest import SHARED_SDISTS

    pkg_info = _metadata.read_pkg_info(SHARED_SDISTS / "flash_attn-2.8.3.tar.gz")
    text = _metadata.core_metadata(
        pkg_info, "2.8.3+cu130torch2.11cxx11abiTRUE", _metadata.torch_requirement("2.11.0+cu130")
    )
    header = text.split("\n\n")[0].splitlines()
    assert "Version: 2.8.3+cu130torch2.11cxx11abiTRUE" in header
    assert "Name: flash_attn" in header
    requires = [line for line in header if line.startswith("Requires-Dist:")]
    assert requires == ["Requires-Dist: torch==2.11.0", "Requires-Dist: einops"]  # einops as is
    assert text.split("\n\n", 1)[1] == pkg_info.split("\n\n", 1)[1]  # description untouched
    # parsed as pip and uv parse it
    parsed = Metadata.from_email(text, validate=False)
    assert [str(r) for r in parsed.requires_dist] == ["torch==2.11.0", "einops"]


def test_core_metadata_adds_the_torch_requirement_upstream_left_out():
    """2.6.3's sdist PKG-INFO lists no requirements at all; the wheel still needs its torch."""
    from conftest import SHARED_SDISTS

    pkg_info = _metadata.read_pkg_info(SHARED_SDISTS / "flash_attn-2.6.3.tar.gz")
    assert "Requires-Dist" not in pkg_info.split("\n\n")[0]
    text = _metadata.core_metadata(pkg_info, "2.6.3+cu124torch2.6cxx11abiFALSE", "torch==2.6.0")
    parsed = Metadata.from_email(text, validate=False)
    assert [str(r) for r in parsed.requires_dist] == ["torch==2.6.0"]


# built for, installed: every pair where the guard and PEP 440 must give the same answer
RELEASES = [
    ("2.11.0+cu130", "2.11.0"),  # PyPI's CUDA build has no local label in its metadata
    ("2.11.0+cu130", "2.11.0+cu130"),
    ("2.11.0+cu130", "2.11.0+cu126"),
    ("2.11.0", "2.11.0+cpu"),
    ("2.11.0+cu130", "2.11.1"),
    ("2.11.0+cu130", "2.14.1"),
    ("2.11.0+cu130", "2.11.0.post1"),
    ("2.12.0.dev20260101+cu130", "2.12.0.dev20260101+cu130"),
    ("2.12.0.dev20260101+cu130", "2.12.0.dev20260102+cu130"),
    ("2.11.0a0+git1234abc", "2.11.0a0+git5678def"),  # source builds
    ("2.11.0a0+git1234abc", "2.11.0"),
]


@pytest.mark.parametrize(
    "installed, cuda",
    [("2.13.0+cpu", None), ("2.13.0", "13.0"), ("2.13.0+cu130", "13.0"), ("2.13.1+cpu", None)],
)
def test_a_cpu_torchs_wheel_requires_the_cpu_torch(installed, cuda):
    """Built on torch 2.13.0+cpu: the requirement names the label (issue 55's N5, D1), so a
    frontend never installs the wheel beside a CUDA torch of that release (PyPI's is
    unlabelled), nor that CUDA torch for it; it and the guard agree."""
    from fa_backend.resources import runtime_guard

    requirement = Requirement(_metadata.torch_requirement("2.13.0+cpu"))
    assert str(requirement) == "torch==2.13.0+cpu"
    built = {"version": "2.13.0+cpu", "cuda": None, "cxx11_abi": 1}
    running = {"version": installed, "cuda": cuda, "cxx11_abi": 1}
    pip_accepts = requirement.specifier.contains(installed, prereleases=True)
    assert (
        pip_accepts == (not runtime_guard.mismatches(built, running)) == (installed == "2.13.0+cpu")
    )


@pytest.mark.parametrize(("built", "installed"), RELEASES)
def test_the_torch_requirement_accepts_exactly_what_the_runtime_guard_accepts(built, installed):
    """One rule: METADATA's Requires-Dist (resolved by pip/uv with PEP 440) and the import
    guard's version check agree on every pair."""
    from fa_backend.resources import runtime_guard

    requirement = Requirement(_metadata.torch_requirement(built))
    pip_accepts = requirement.specifier.contains(installed, prereleases=True)
    running = {"version": installed, "cuda": "13.0", "cxx11_abi": 1}
    guard_accepts = not runtime_guard.mismatches(
        {"version": built, "cuda": "13.0", "cxx11_abi": 1}, running
    )
    assert pip_accepts == guard_accepts, (requirement, installed)
    assert pip_accepts == (Version(built).public == Version(installed).public)
