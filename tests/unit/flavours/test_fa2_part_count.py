"""How many parts each FA2 kernel source is compiled in (flavours/fa2/_costs.best_parts): the
count the build-time model finds fastest on the build's jobs, the idle-jobs rule where the model
barely differs. Parts pay where a source keeps its many kernels (no DISABLE switch); with four
or more switches a part costs what its whole source does (measured on the H100: the training
set whole in 107 s, in 4 parts 171 s), so such sets compile each source whole."""

from __future__ import annotations

from fa_backend.flavours.fa2 import _costs, _tu_parts

FORWARD = [
    f"flash_{p}_hdim128_bf16{c}_sm80.cu" for p in ("fwd", "fwd_split") for c in ("", "_causal")
]
BACKWARD = [f"flash_bwd_hdim128_bf16{c}_sm80.cu" for c in ("", "_causal")]
FULL = [
    f"flash_{p}_hdim{h}_{d}{c}_sm80.cu"
    for p in ("fwd", "fwd_split", "bwd")
    for h in (32, 64, 96, 128, 192, 256)
    for d in ("fp16", "bf16")
    for c in ("", "_causal")
]


def test_the_model_picks_the_parts():
    # the forward-only inference set: the measured 4 parts on 16 jobs, 2 on 8
    assert _costs.best_parts(None, 16, 16, FORWARD, True, 0) == 4
    assert _costs.best_parts(None, 8, 8, FORWARD, True, 0) == 2
    # all five switches: splitting gains nothing, the idle-jobs rule (4) does not win a tie
    assert _tu_parts.choose(None, 16, FORWARD, True) == 4
    assert _costs.best_parts(None, 16, 16, FORWARD, True, 5) == 1
    # the training set (dropout, alibi, softcap, local off): whole sources
    training = FORWARD + BACKWARD
    assert _tu_parts.choose(None, 16, training, True) == 2
    assert _costs.best_parts(None, 16, 16, training, True, 4) == 1
    assert _costs.best_parts(None, 16, 16, training, True, 0) == 4  # every feature: parts pay
    assert 1 < _costs.best_parts(None, 16, 16, training, True, 2) < 4  # in between
    assert _costs.best_parts(None, 2, 2, training, True, 0) == 1  # a 2-core box: never
    assert _costs.best_parts(None, 16, 16, FULL, True, 0) == 1  # the full set fills 16 alone


def test_the_setting_and_the_release_decide_first():
    assert _costs.best_parts(3, 16, 16, FORWARD, True, 0) == 3
    assert _costs.best_parts(None, 16, 16, FORWARD, False, 0) == 1  # no patch: never split
    assert _costs.best_parts(None, 16, 16, None, True, 0) == 1  # an unknown kernel layout


def test_a_part_costs_its_whole_source_with_four_switches():
    source = FORWARD[0]
    half, quarter = _tu_parts.part_names(source, 2)[1], _tu_parts.part_names(source, 4)[1]
    assert _costs.source_seconds(half, 4) == _costs.source_seconds(source, 4)
    assert _costs.source_seconds(quarter, 5) == _costs.source_seconds(source, 5)
    assert _costs.source_seconds(quarter, 0) < 0.6 * _costs.source_seconds(source, 0)


def test_backward_sources_split_like_forward_ones():
    assert _tu_parts.splittable("flash_bwd_hdim128_bf16_causal_sm80.cu")
    names = _tu_parts.split_names(BACKWARD, 2)
    assert names == [p for k in BACKWARD for p in _tu_parts.part_names(k, 2)]
    assert _costs.source_seconds(names[0]) == _costs.PART0_OTHER_SECONDS
    assert _tu_parts.source_of(names[1]) == BACKWARD[0]
