"""The runtime guard (resources/runtime_guard.py) for a module built against torch's stable ABI:
any torch from the floor on, of the same CUDA major, whatever its release or C++ ABI; a torch
below the floor or of another CUDA major is refused, and the message says both ways out."""

from __future__ import annotations

import pytest

from fa_backend.resources import runtime_guard

BUILT = {"version": "2.11.0+cu130", "cuda": "13.0", "cxx11_abi": 1, "stable_abi": "2.9.0"}


@pytest.mark.parametrize(
    "running, differs",
    [
        ({"version": "2.14.1+cu130", "cuda": "13.0", "cxx11_abi": 1}, []),
        ({"version": "2.9.0+cu130", "cuda": "13.2", "cxx11_abi": 1}, []),
        ({"version": "2.11.0", "cuda": "13.0", "cxx11_abi": 0}, []),  # no C++ type crosses
        ({"version": "2.10.0.dev20251001+cu130", "cuda": "13.0", "cxx11_abi": 1}, []),
        ({"version": "2.8.0+cu130", "cuda": "13.0", "cxx11_abi": 1}, ["older than 2.9.0"]),
        ({"version": "2.9.0.dev20250901", "cuda": "13.0", "cxx11_abi": 1}, ["older than 2.9.0"]),
        ({"version": "2.9.1+cu128", "cuda": "12.8", "cxx11_abi": 1}, ["CUDA 13.0 vs 12.8"]),
        ({"version": "2.14.1+cpu", "cuda": None, "cxx11_abi": 1}, ["CUDA 13.0 vs none"]),
    ],
)
def test_what_a_stable_module_runs_on(running, differs):
    found = runtime_guard.mismatches(BUILT, running)
    assert len(found) == len(differs), found
    for text, expected in zip(found, differs):
        assert expected in text


def test_at_least_reads_versions_as_pep_440_does():
    from packaging.version import Version

    versions = ["2.8.9", "2.9.0", "2.9.0.post1", "2.9.0rc1", "2.9.0.dev1+cu128", "2.10.0", "3"]
    for version in versions:
        assert runtime_guard.at_least(version, "2.9.0") == (Version(version) >= Version("2.9.0"))


def test_the_message_names_the_floor_and_both_fixes():
    running = {"version": "2.9.1+cu128", "cuda": "12.8", "cxx11_abi": 1}
    text = runtime_guard._message("headline", BUILT, running, None, name="flash-attn-3")
    assert "built for:  torch >= 2.9.0 of CUDA 13 (torch's stable ABI; built with torch " in text
    assert "Install a torch >= 2.9.0 built for CUDA 13, e.g.:" in text
    assert "--index-url https://download.pytorch.org/whl/cu130" in text
    assert "or rebuild flash-attn-3 against the installed torch" in text
    assert "--no-build-isolation --no-deps --force-reinstall" in text


def test_the_provenance_line():
    assert runtime_guard.binding("2.11.0+cu130", "2.9.0") == (
        "stable ABI, torch >= 2.9.0 (built with 2.11.0)"
    )
    assert runtime_guard.binding("2.11.0+cu130", None) == "torch 2.11.0 (its C++ ABI)"
