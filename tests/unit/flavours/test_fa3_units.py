"""The units fa-shim plans for a FlashAttention-3 set (flavours/fa3/_units.py) are exactly those
upstream's hopper/setup.py put in build.ninja for it, for both lines: the lists in fa3_units/
were recorded from real prepares (their first lines say how), v2.8.3's aggregates replaced by the
files they include as the driver compiles them (release.toml's forward-units = "split"); check()
refuses any difference at build time, so the estimate, the memory plan and the disk check count
what is compiled."""

from __future__ import annotations

from pathlib import Path

import pytest

from fa_backend.flavours import _registry
from fa_backend.flavours.fa3 import _releases, _units

RECORDED = Path(__file__).parent / "fa3_units"
V283 = (
    "BACKWARD", "SPLIT", "PAGEDKV", "APPENDKV", "LOCAL", "SOFTCAP", "PACKGQA", "FP16", "FP8",
    "VARLEN", "CLUSTER", "HDIM64", "HDIM96", "HDIM128", "HDIM192", "HDIM256", "SM80",
)  # fmt: skip
MAIN = (*V283, "HDIMDIFF64", "HDIMDIFF192")  # what hopper/setup.py at 0251105a reads
NO_FEATURES = "fp8,split,paged-kv,appendkv,local,softcap,packgqa,varlen,cluster"


def _recorded(name: str) -> list[str]:
    lines = (RECORDED / name).read_text().splitlines()
    return sorted(line for line in lines if line and not line.startswith("#"))


def _planned(line: str, switches: tuple[str, ...], **settings: str) -> list[str]:
    config = {k.replace("_", "-"): v for k, v in settings.items()}
    tailoring = _units.tailoring(_registry.load_settings(config, environ={}), switches)
    return sorted(_units.planned(_releases.release(line), tailoring))


@pytest.mark.parametrize(
    "recorded, line, switches, settings",
    [
        ("v2.8.3-full.txt", "2.8.3", V283, {}),
        (
            "v2.8.3-hdim128-bf16-nofeatures.txt",
            "2.8.3",
            V283,
            {"head_dims": "128", "dtypes": "bf16", "disable": NO_FEATURES},
        ),
        ("main-0251105a-full.txt", "main-0251105a", MAIN, {}),
        (
            "main-0251105a-hdim128-bf16-nofeatures.txt",
            "main-0251105a",
            MAIN,
            {"head_dims": "128", "dtypes": "bf16", "disable": NO_FEATURES},
        ),
        (
            "main-0251105a-hdim64-192-nosplit.txt",
            "main-0251105a",
            MAIN,
            {"head_dims": "64,192", "disable": "split"},
        ),
        (
            "main-0251105a-hdim192-fwd-nopackgqa-nofp8.txt",
            "main-0251105a",
            MAIN,
            {"head_dims": "192", "forward_only": "true", "disable": "fp8,packgqa"},
        ),
    ],
)
def test_planned_units_are_what_setup_py_compiled(recorded, line, switches, settings, fa3_trees):
    expected = _recorded(recorded)
    if _releases.release(line).split_aggregates:  # the driver compiles what they include
        tailoring = _units.tailoring(
            _registry.load_settings(
                {k.replace("_", "-"): v for k, v in settings.items()}, environ={}
            ),
            switches,
        )
        off = _units.switches_on(tailoring.env)
        split = _units.split_sources(fa3_trees["hopper"] / "hopper", off)
        expected = sorted(u for name in expected for u in split.get(name, [name]))
    assert _planned(line, switches, **settings) == expected


def test_the_stable_line_compiles_per_head_dim_units_and_its_stable_api():
    full = _recorded("main-0251105a-full.txt")
    assert len(full) == 233  # v2.8.3's full set: 73 units
    assert "flash_api_stable.cpp" in full and "flash_api.cpp" not in full
    assert not any("hdimall" in u or "hdimdiff" in u for u in full)
    assert sum(u.startswith("flash_fwd_hdim64_256_") for u in full) == 20  # bf16/fp16 only
    assert sum(u.startswith("flash_fwd_hdim192_128_") for u in full) == 30  # and e4m3


def test_head_dims_own_the_hdimdiff_switches():
    """A set without head dim 64 (192) leaves out the hdim64_* (hdim192_128) units: they are
    empty there (their instantiations sit behind DISABLE_HDIM64/192)."""
    tailoring = _units.tailoring(_registry.load_settings({"head-dims": "128"}, environ={}), MAIN)
    env = dict(tailoring.env)
    assert env["FLASH_ATTENTION_DISABLE_HDIMDIFF64"] == "TRUE"
    assert env["FLASH_ATTENTION_DISABLE_HDIMDIFF192"] == "TRUE"
    assert tailoring.label == ".hdim128"  # no `nohdimdiff64`: head-dims says it
    tailoring = _units.tailoring(_registry.load_settings({"head-dims": "64,192"}, environ={}), MAIN)
    assert dict(tailoring.env)["FLASH_ATTENTION_DISABLE_HDIMDIFF64"] == "FALSE"
    with pytest.raises(Exception, match="which the setting head-dims decides"):
        _units.tailoring(_registry.load_settings({"disable": "hdimdiff64"}, environ={}), MAIN)
