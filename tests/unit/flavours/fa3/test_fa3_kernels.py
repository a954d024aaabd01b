"""FlashAttention-3 tailored sets (fa_backend/flavours/fa3/_units.py): fa-shim's settings as the
FLASH_ATTENTION_DISABLE_* environment of the real hopper/setup.py of v2.8.3 (from ../shared/fa3),
the switch names read from that file."""

from __future__ import annotations

import re

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.flavours import _registry
from fa_backend.flavours.fa3 import _units

V283_SWITCHES = (
    "BACKWARD", "SPLIT", "PAGEDKV", "APPENDKV", "LOCAL", "SOFTCAP", "PACKGQA", "FP16", "FP8",
    "VARLEN", "CLUSTER", "HDIM64", "HDIM96", "HDIM128", "HDIM192", "HDIM256", "SM80",
)  # fmt: skip


@pytest.fixture(scope="module")
def setup_py(fa3_trees) -> str:
    return (fa3_trees["hopper"] / "hopper" / "setup.py").read_text()


@pytest.fixture(scope="module")
def known(setup_py) -> tuple[str, ...]:
    return _units.switches(setup_py)


def _set(known, **settings) -> _units.Fa3Tailoring:
    config = {k.replace("_", "-"): v for k, v in settings.items()}
    return _units.tailoring(_registry.load_settings(config, environ={}), known)


def _on(t: _units.Fa3Tailoring) -> set[str]:
    return {name.removeprefix(_units.ENV_PREFIX) for name, value in t.env if value == "TRUE"}


def test_the_switches_are_read_from_setup_py(setup_py, known):
    assert known == V283_SWITCHES
    # each one, SM80 aside (it defines ..._SM8x), is a define the C++ side tests
    defines = set(re.findall(r"-DFLASHATTENTION_DISABLE_(\w+)", setup_py))
    assert defines == (set(known) - {"SM80"}) | {"SM8x"}


def test_the_full_set_says_every_switch_false_and_leaves_sm80_to_the_archs(known):
    t = _set(known)
    assert t.full and t.label == "" and t.backward
    assert t.head_dims == ("64", "96", "128", "192", "256") and t.dtypes == ("fp16", "bf16")
    assert dict(t.env) == {f"FLASH_ATTENTION_DISABLE_{s}": "FALSE" for s in V283_SWITCHES[:-1]}


def test_the_issues_set_bf16_hdim128(known):
    t = _set(known, head_dims="128", dtypes="bf16")
    assert _on(t) == {"HDIM64", "HDIM96", "HDIM192", "HDIM256", "FP16"}
    assert t.label == ".hdim128.bf16" and t.head_dims == ("128",) and t.dtypes == ("bf16",)


def test_forward_only_and_features_in_any_spelling(known):
    t = _set(known, forward_only="true", disable="Paged-KV, append_kv;FP8 softcap")
    assert _on(t) == {"BACKWARD", "PAGEDKV", "APPENDKV", "FP8", "SOFTCAP"}
    assert t.disabled == ("pagedkv", "appendkv", "softcap", "fp8")  # setup.py's order
    assert t.label == ".fwd.nopagedkv.noappendkv.nosoftcap.nofp8"
    assert not t.backward


def test_every_feature_setup_py_knows_can_be_disabled(known):
    features = "fp8,split,paged-kv,append-kv,varlen,softcap,local,packgqa,cluster"
    t = _set(known, disable=features)
    assert _on(t) == {"FP8", "SPLIT", "PAGEDKV", "APPENDKV", "VARLEN", "SOFTCAP", "LOCAL"} | {
        "PACKGQA",
        "CLUSTER",
    }


def test_an_unknown_feature_gets_a_did_you_mean(known):
    with pytest.raises(FaShimError) as info:
        _set(known, disable="pagedk")
    assert "disable has 'pagedk'" in info.value.cause and "Did you mean 'pagedkv'?" in (
        info.value.cause
    )
    assert "split, pagedkv, appendkv, local, softcap, packgqa, fp8, varlen, cluster" in (
        info.value.fix
    )
    with pytest.raises(FaShimError, match="'dropout', which fa-shim does not know"):
        _set(known, disable="dropout")  # an FA2 switch, not FA3's


@pytest.mark.parametrize(
    "name, owner", [("hdim64", "head-dims"), ("FP16", "dtypes"), ("backward", "forward-only")]
)
def test_a_switch_another_setting_owns_names_that_setting(known, name, owner):
    with pytest.raises(FaShimError) as info:
        _set(known, disable=name)
    assert f"which the setting {owner} decides" in info.value.cause
    assert f"-C {owner}=" in info.value.fix


def test_sm80_is_the_archs_choice(known):
    with pytest.raises(FaShimError, match="the setting cuda-archs decides"):
        _set(known, disable="sm80")


def test_head_dims_and_dtypes_are_checked(known):
    with pytest.raises(FaShimError, match="runs on the hdim96 kernels: use 96"):
        _set(known, head_dims="80")
    with pytest.raises(FaShimError, match="'512', which is not a flash-attn kernel head dim"):
        _set(known, head_dims="512")
    with pytest.raises(FaShimError) as info:
        _set(known, dtypes="fp16")
    assert "always compiles its bf16 kernels" in info.value.cause
    assert _set(known, dtypes="bfloat16,half").full  # both: nothing left out


def test_a_feature_this_setup_py_lacks_is_refused(setup_py):
    """Against what the version knows: without CLUSTER in setup.py, `cluster` is unknown."""
    older = setup_py.replace('os.getenv("FLASH_ATTENTION_DISABLE_CLUSTER", "FALSE")', "False")
    known = _units.switches(older)
    assert "CLUSTER" not in known
    with pytest.raises(FaShimError, match="'cluster', which fa-shim does not know"):
        _set(known, disable="cluster")
    no_fp16 = _units.switches(
        setup_py.replace('os.getenv("FLASH_ATTENTION_DISABLE_FP16", "FALSE")', "False")
    )
    with pytest.raises(FaShimError, match="no FLASH_ATTENTION_DISABLE_FP16 switch"):
        _set(no_fp16, dtypes="bf16")


def test_a_setup_py_without_switches_is_one_error():
    with pytest.raises(FaShimError, match="reads no FLASH_ATTENTION_DISABLE_"):
        _units.switches("from setuptools import setup\nsetup()\n")
