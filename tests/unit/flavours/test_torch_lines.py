"""Which lines a torch can take, as doctor lists them (Flavour.torch_lines): FA2's per-torch
line always, its stable line from its floor (2.10) on, with the build's own refusal as the why;
FA3's lines by their floors. Torches given as values (no venv)."""

from __future__ import annotations

from conftest import REPO, torch_info

from fa_backend.flavours import _registry
from fa_backend.flavours.fa2._flavour import FLAVOUR as FA2
from fa_backend.flavours.fa3._flavour import FLAVOUR as FA3


def _lines(flavour, project, version: str, cuda: str) -> dict[str, str]:
    settings = _registry.load_settings({}, environ={}, project_dir=project)
    return flavour.torch_lines(settings, torch_info(version, cuda))


def test_torch_2_9_1_has_the_per_torch_line_and_not_the_stable_one():
    lines = _lines(FA2, REPO, "2.9.1+cu128", "12.8")
    assert lines["per-torch"].startswith("yes, a wheel for torch 2.9.1+cu128 alone")
    assert lines["stable"] == (
        "no: -C torch-abi=stable builds flash-attn 2.8.3.post2 on torch's stable ABI, for torch "
        ">= 2.10.0; this torch is 2.9.1+cu128."
    )


def test_torch_2_15_has_both():
    lines = _lines(FA2, REPO, "2.15.0+cu132", "13.2")
    assert lines["stable"].startswith("yes, one wheel for every torch >= 2.10.0 of CUDA 13")
    assert lines["per-torch"].startswith("yes, a wheel for torch 2.15.0+cu132 alone")


def test_fa3_lines_by_their_floors():
    old = _lines(FA3, REPO / "flash-attn-3", "2.8.0+cu128", "12.8")
    assert old["main-0251105a (stable ABI)"] == (
        "no: its floor is torch 2.9.0; this torch is 2.8.0+cu128"
    )
    assert old["2.8.3 (per-torch)"] == "yes, a wheel for torch 2.8.0+cu128 alone"
    new = _lines(FA3, REPO / "flash-attn-3", "2.15.0+cu132", "13.2")
    assert new["main-0251105a (stable ABI)"] == "yes, every torch >= 2.9.0"
