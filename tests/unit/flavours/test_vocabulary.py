"""The words users give a kernel set (fa_backend/flavours/_vocabulary.py): head dims in every
spelling, names through their aliases, in the release's order, and one error with a
did-you-mean for a word no release knows."""

from __future__ import annotations

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.flavours import _vocabulary

HEAD_DIMS = ("32", "64", "96", "128", "160", "192", "224", "256")  # flash-attn 2.8.3's
DTYPES = ("fp16", "bf16")


def test_head_dims_in_every_spelling_come_back_in_the_releases_order():
    given = ["hdim256", " d64", "128", "HDIM128"]
    assert _vocabulary.head_dims(given, HEAD_DIMS) == ("64", "128", "256")


def test_a_head_dim_between_kernels_names_the_kernel_it_runs_on():
    with pytest.raises(FaShimError) as info:
        _vocabulary.head_dims(["80"], HEAD_DIMS)
    assert "head-dims has '80', which is not a flash-attn kernel head dim." in info.value.cause
    assert "Head dim 80 runs on the hdim96 kernels: use 96." in info.value.cause
    assert info.value.fix == f"use some of {', '.join(HEAD_DIMS)} (e.g. -C head-dims=64,128)."


@pytest.mark.parametrize(("value", "hint"), [("hdim1288", "Did you mean '128'?"), ("777", "")])
def test_a_head_dim_beyond_every_kernel_gets_a_did_you_mean_or_nothing(value, hint):
    with pytest.raises(FaShimError) as info:
        _vocabulary.head_dims([value], HEAD_DIMS)
    assert "runs on the" not in info.value.cause
    assert info.value.cause.endswith(f"kernel head dim.{' ' + hint if hint else ''}")


def test_choose_takes_aliases_any_case_and_keeps_the_known_order():
    chosen = _vocabulary.choose(
        ["BFloat16", " half "], DTYPES, _vocabulary.DTYPE_ALIASES, "dtypes", "bf16"
    )
    assert chosen == ("fp16", "bf16")


def test_choose_refuses_an_unknown_name_with_the_setting_and_an_example():
    with pytest.raises(FaShimError) as info:
        _vocabulary.choose(["bf61"], DTYPES, _vocabulary.DTYPE_ALIASES, "dtypes", "bf16")
    assert (
        info.value.cause == "dtypes has 'bf61', which fa-shim does not know. Did you mean 'bf16'?"
    )
    assert info.value.fix == "use some of fp16, bf16 (e.g. -C dtypes=bf16)."


def test_did_you_mean_is_empty_when_nothing_is_close():
    assert _vocabulary.did_you_mean("dropout", ["dropout", "alibi"]) == " Did you mean 'dropout'?"
    assert _vocabulary.did_you_mean("zzz", ["dropout", "alibi"]) == ""
    assert _vocabulary.did_you_mean("alibbi", ["alibi"], "({})") == "(alibi)"
