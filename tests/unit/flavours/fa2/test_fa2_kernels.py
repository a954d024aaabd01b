"""Tailored kernel sets (fa_backend/flavours/fa2/_kernels.py): settings -> sources/defines/label,
the check of the compiled sources, and the label through wheel naming. The dispatch patch on the
real sdists: tests/integration/test_kernel_dispatch.py; proofs that a tailored flash_api compiles
with references to exactly the kernels the set keeps: tests/e2e/test_kernels_prepare.py."""

from __future__ import annotations

import pytest
from conftest import INFERENCE, INFERENCE_KERNELS, tailor
from packaging.version import Version

from fa_backend.core._errors import FaShimError
from fa_backend.flavours.fa2 import _kernels, _releases
from fa_backend.flavours.fa2._flavour import FLAVOUR
from fa_backend.toolchain._compile_commands import Command
from fa_backend.wheel import _metadata

FA2 = FLAVOUR.names

BASE_LABEL = "cu130torch2.11cxx11abiTRUE"


# ------------------------------------------------------------------------------- the model


def test_no_settings_is_the_full_set_for_any_version():
    for version in ("2.8.3", "2.8.3.post2", "0.1.0"):
        t = tailor(version)
        assert t.full and t.label == "" and not t.defines and not t.exclude_sources


def test_inference_set():
    t = tailor(**INFERENCE)
    assert t.label == ".hdim128.bf16.fwd" and t.kernel_set == "hdim128.bf16.fwd"
    assert t.defines == (
        "-DFA_SHIM_TAILORED",
        *(f"-DFA_SHIM_NO_HDIM{d}" for d in (32, 64, 96, 192, 256)),
        "-DFA_SHIM_NO_FP16",
        "-DFA_SHIM_NO_BACKWARD",
    )
    assert "flash_bwd_*.cu" in t.exclude_sources and "flash_*_fp16_*.cu" in t.exclude_sources
    assert _kernels.expected_kernels(t, "2.8.3") == INFERENCE_KERNELS
    assert t.describe()["head_dims"] == [128]


def test_label_order_is_canonical_and_pep440():
    t = tailor(head_dims=("128", "hdim64"), disable=("uneven-k", "dropout"), dtypes=("float16",))
    assert t.label == ".hdim64.hdim128.fp16.nodropout.nounevenk"
    version = _metadata.full_version("2.8.3", BASE_LABEL + t.label)
    assert (
        Version(version).local
        == "cu130torch2.11cxx11abitrue.hdim64.hdim128.fp16.nodropout.nounevenk"
    )


def test_all_values_listed_is_the_full_set():
    t = tailor(head_dims=("32", "64", "96", "128", "192", "256"), dtypes=("bf16", "fp16"))
    assert t.full


def test_disable_only_defines_upstream_switches():
    t = tailor(disable=("softcap", "alibi"))
    assert t.defines == ("-DFLASHATTENTION_DISABLE_ALIBI", "-DFLASHATTENTION_DISABLE_SOFTCAP")
    assert t.exclude_sources == () and t.label == ".noalibi.nosoftcap"
    assert len(_kernels.expected_kernels(t, "2.8.3")) == 72


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"head_dims": ("80",)}, ["'80'", "hdim96", "use 96"]),
        ({"head_dims": ("12x",)}, ["'12x'", "32, 64, 96, 128, 192, 256"]),
        ({"dtypes": ("bf61",)}, ["'bf61'", "Did you mean 'bf16'?"]),
        ({"dtypes": ("fp32",)}, ["'fp32'", "fp16, bf16"]),
        ({"disable": ("dropuot",)}, ["'dropuot'", "Did you mean 'dropout'?"]),
    ],
)
def test_unknown_values_are_errors_with_hints(settings, words):
    with pytest.raises(FaShimError) as exc:
        tailor(**settings)
    message = exc.value.render()
    assert all(w in message for w in words), message


def test_tailoring_an_unpatched_version_is_an_error():
    with pytest.raises(FaShimError) as exc:
        tailor("2.6.3", forward_only=True)
    assert "2.6.3" in exc.value.cause and "2.8.3" in exc.value.fix


def test_every_tailorable_version_ships_its_patch():
    spaces = {v: _releases.release(v).kernels for v in _releases.tailorable()}
    assert list(spaces) == ["2.8.3", "2.8.3.post2"]
    for version, space in spaces.items():
        names = [p.name for p in _releases.patches(version)]
        assert space.patch in names, (version, names)


def test_check_sources():
    t = tailor(**INFERENCE)
    commands = [Command("cxx", "/s/flash_api.cpp", ())]
    commands += [Command("nvcc", f"/s/{k}", ()) for k in sorted(INFERENCE_KERNELS)]
    _kernels.check_sources(commands, t, "2.8.3")
    with pytest.raises(FaShimError) as exc:  # one kernel lost: an undefined symbol at import
        _kernels.check_sources(commands[:-1], t, "2.8.3")
    assert "1 missing" in exc.value.cause
    extra = [*commands, Command("nvcc", "/s/flash_bwd_hdim128_bf16_sm80.cu", ())]
    with pytest.raises(FaShimError):
        _kernels.check_sources(extra, t, "2.8.3")


def test_label_survives_wheel_naming():
    t = tailor(**INFERENCE)
    version = _metadata.full_version("2.8.3", BASE_LABEL + t.label)
    name = _metadata.wheel_filename(version, _metadata.wheel_tag(FA2), FA2)
    assert name.startswith(f"flash_attn-2.8.3+{BASE_LABEL}.hdim128.bf16.fwd-cp")
