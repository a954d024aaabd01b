"""Forward kernel sources compiled as parts (-C tu-parts, vendored 30-tu-parts.patch): how many
parts, and the check that no part goes missing. The part files written into the real patched
2.8.3 source: tests/integration/test_tu_parts_files.py; the build description torch writes for
them: tests/e2e/test_tu_parts_prepare.py. The parts' kernels compiling, linking and importing is
tests/e2e/test_real_build.py's build (split); computing right, the GPU run's
(docs/benchmarks.md)."""

from __future__ import annotations

import pytest
from conftest import INFERENCE, INFERENCE_KERNELS, tailor

from fa_backend.core._errors import FaShimError
from fa_backend.flavours.fa2 import _kernels, _tu_parts
from fa_backend.settings._settings import Settings
from fa_backend.toolchain._compile_commands import Command

SPLIT = "flash_fwd_split_hdim128_bf16_sm80"


def test_parts_fill_the_idle_jobs():
    four = sorted(INFERENCE_KERNELS)
    assert _tu_parts.choose(None, 16, four, True) == 4  # the tailored set on 16 cores
    assert _tu_parts.choose(None, 2, four, True) == 1  # a 2-core box: nothing idle
    assert _tu_parts.choose(None, 64, four, True) == _tu_parts.MAX_PARTS
    assert _tu_parts.choose(None, 16, [f"k{i}.cu" for i in range(72)], True) == 1  # full set
    assert _tu_parts.choose(3, 2, four, True) == 3  # the setting decides
    assert _tu_parts.choose(4, 16, four, False) == 1  # no patch for this version: never


def test_sources_counted_with_their_parts():
    kernels = [*sorted(INFERENCE_KERNELS), "flash_bwd_hdim128_bf16_sm80.cu"]
    assert len(_tu_parts.split_names(kernels, 1)) == 5
    assert len(_tu_parts.split_names(kernels, 4)) == 5 * 5  # backward sources split too (issue 24)


def _commands(names):
    return [Command("cxx", "/s/flash_api.cpp", ())] + [
        Command("nvcc", f"/s/{n}", ()) for n in names
    ]


def test_a_split_build_must_compile_every_part():
    t = tailor(**INFERENCE)
    parts = [p for k in sorted(INFERENCE_KERNELS) for p in _tu_parts.part_names(k, 2)]
    _kernels.check_sources(_commands(parts), t, "2.8.3")
    lost = [p for p in parts if p != f"{SPLIT}.part2of2.cu"]
    with pytest.raises(FaShimError) as exc:  # its kernels would be undefined symbols at import
        _kernels.check_sources(_commands(lost), t, "2.8.3")
    assert f"incomplete parts: {SPLIT}.cu: parts [(0, 2), (1, 2)]" in exc.value.details
    full = _kernels.tailoring(Settings(), "2.8.3")
    with pytest.raises(FaShimError):  # a full build is held to the same rule
        _kernels.check_sources(_commands(lost), full, "2.8.3")
