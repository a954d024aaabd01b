"""Architecture selection, mapping onto upstream's mechanism, and the -gencode check, on values
(`nvcc --list-gpu-arch` as recorded). With this machine's real nvcc and driver:
tests/integration/test_archs_nvcc.py; through a CUDA torch: tests/e2e/test_archs_cuda_torch.py."""

from __future__ import annotations

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.flavours.fa2 import _releases
from fa_backend.toolchain import _archs
from fa_backend.toolchain._archs import Selection, parse_arch_list, select_archs, upstream_targets
from fa_backend.toolchain._compile_commands import Command

# `nvcc --list-gpu-arch` of CUDA 13.0 and of 12.4 (no Blackwell)
CUDA130 = ["75", "80", "86", "87", "88", "89", "90", "100", "110", "103", "120", "121"]
CUDA124 = ["50", "52", "53", "60", "61", "62", "70", "72", "75", "80", "86", "87", "89", "90"]


def mechanism(version: str) -> _releases.Mechanism:
    return _releases.release(version).archs


FA28 = mechanism("2.8.3")
DEFAULT = FA28.default


def pick(setting=(), caps=(), env=None, torch_list=(), nvcc=CUDA130):
    return select_archs(setting, caps, env, torch_list, nvcc, DEFAULT)


# ------------------------------------------------------------------------------- selection


def test_setting_overrides_everything():
    sel = pick(setting=("90",), caps=[(8, 0)], env="8.0", torch_list=["80"])
    assert sel == Selection(("90",), "setting cuda-archs")


def test_visible_gpus_deduplicated_and_sorted():
    sel = pick(caps=[(9, 0), (8, 6), (9, 0)], env="8.0;9.0", torch_list=["80", "90"])
    assert sel.archs == ("86", "90") and sel.source == "the visible GPUs"


def test_torch_cuda_arch_list_env_when_no_gpu():
    # an NGC-style list: pre-Ampere entries are dropped, +PTX ignored
    sel = pick(env="5.2 6.0 7.0 7.5 8.0 8.6 9.0+PTX", torch_list=["80"])
    assert sel.archs == ("80", "86", "90")
    assert sel.source == "TORCH_CUDA_ARCH_LIST"
    assert sel.dropped == ("52", "60", "70", "75")


def test_native_env_falls_through_to_torch_list():
    sel = pick(env="native", torch_list=parse_arch_list("sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"))
    assert sel.archs == ("80", "86", "90", "100", "120")
    assert sel.source == "torch's CUDA arch list"


def test_upstream_default_last_and_filtered_by_nvcc():
    assert pick().archs == ("80", "90", "100", "120")
    sel = pick(nvcc=CUDA124)  # CUDA 12.4 cannot compile Blackwell; upstream skips it too
    assert sel.archs == ("80", "90") and sel.dropped == ("100", "120")


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        (("75", "90"), ["75", "8.0+"]),
        (("120",), ["120", "nvcc"]),
    ],
)
def test_setting_with_unbuildable_arch_is_an_error(setting, words):
    with pytest.raises(FaShimError) as exc:
        pick(setting=setting, nvcc=CUDA124)
    message = exc.value.render()
    assert all(w in message for w in words), message
    assert "fix: use some of 80, 86, 87, 89, 90" in message


def test_only_unsupported_gpus_is_an_error():
    with pytest.raises(FaShimError) as exc:
        pick(caps=[(7, 5)])
    assert "75 predate Ampere" in exc.value.cause and "-C cuda-archs" in exc.value.fix


# `nvcc --list-gpu-arch` of CUDA 12.8: Blackwell's 10.0 and 12.0, not yet 10.3 or 12.1
CUDA128 = [*CUDA124, "100", "101", "120"]


@pytest.mark.parametrize(("cap", "target"), [((10, 3), "100"), ((12, 1), "120")])
def test_gpu_newer_than_nvcc_runs_its_majors_code(cap, target):
    """A B300 (10.3) or GB10 (12.1) with a CUDA 12.8 nvcc: sm_100 / sm_120 code runs on it."""
    sel = pick(caps=[cap], nvcc=CUDA128)
    assert sel.archs == (f"{cap[0]}{cap[1]}",) and sel.dropped == ()
    assert upstream_targets(sel.archs, FA28)[0] == [target]


def test_gpu_whose_major_this_nvcc_lacks_is_left_out():
    with pytest.raises(FaShimError) as exc:
        pick(caps=[(10, 3)], nvcc=CUDA124)
    assert "103 are unknown to the chosen nvcc" in exc.value.cause


def test_mixed_gpus_keep_the_supported_ones():
    sel = pick(caps=[(7, 5), (8, 0)])
    assert sel.archs == ("80",) and sel.dropped == ("75",)


@pytest.mark.parametrize(
    ("text", "archs"),
    [
        ("8.0;8.6+PTX 9.0a", ["80", "86", "90a"]),
        ("sm_90,compute_100", ["90", "100"]),
        ("Ampere;Hopper", ["80", "86", "90"]),
        ("12.0 12.1", ["120", "121"]),
        ("nonsense", []),
    ],
)
def test_parse_arch_list(text, archs):
    assert parse_arch_list(text) == archs


# ------------------------------------------------------------------------------- upstream mapping


@pytest.mark.parametrize(
    ("archs", "targets"),
    [
        (["90"], ["90"]),
        (["86", "89"], ["80"]),  # both run sm_80 code
        (["80", "86", "90"], ["80", "90"]),
        (["103"], ["100"]),
        (["121"], ["120"]),
        (["90a"], ["90"]),
        (["100a", "120"], ["100", "120"]),
    ],
)
def test_fa28_targets(archs, targets):
    got, notes = upstream_targets(archs, FA28)
    assert got == targets
    assert len(notes) == sum(a not in FA28.known for a in archs)


def test_arch_upstream_cannot_serve_is_an_error():
    with pytest.raises(FaShimError) as exc:
        upstream_targets(["90", "110"], FA28)
    assert "110" in exc.value.cause and "80, 90, 100, 120" in exc.value.cause


def test_older_versions_map_onto_their_mechanism():
    assert mechanism("2.7.4.post1") == FA28  # FLASH_ATTN_CUDA_ARCHS since 2.7.3
    backport = mechanism("2.6.3")  # through fa-shim's 02-cuda-archs.patch
    assert backport.env == "FLASH_ATTN_CUDA_ARCHS" and backport.known == ("80", "90")
    assert upstream_targets(["86", "90"], backport)[0] == ["80", "90"]
    with pytest.raises(FaShimError):
        upstream_targets(["100"], backport)
    fixed = mechanism("2.5.0")  # unpinned and unpatched: its list is hard-coded
    assert fixed.env is None
    assert upstream_targets(["86", "90"], fixed)[0] == ["80", "90"]


def test_arch_env():
    assert _archs.arch_env(["80", "120"], FA28) == {
        "FLASH_ATTN_CUDA_ARCHS": "80;120",
        "TORCH_CUDA_ARCH_LIST": "8.0;12.0",
    }
    assert _archs.arch_env(["80"], mechanism("2.6.3")) == {
        "FLASH_ATTN_CUDA_ARCHS": "80",
        "TORCH_CUDA_ARCH_LIST": "8.0",
    }
    assert "FLASH_ATTN_CUDA_ARCHS" not in _archs.arch_env(["80"], mechanism("2.5.0"))


# ------------------------------------------------------------------------------- gencode check


def nvcc_cmd(*flags: str, file: str = "/x/flash_fwd_hdim128_bf16_sm80.cu") -> Command:
    return Command("nvcc", file, ("nvcc", "-c", file, *flags))


def test_gencodes_reads_every_spelling():
    cmd = nvcc_cmd(
        "-gencode",
        "arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=[sm_90,compute_90]",
        "--generate-code=arch=compute_100,code=sm_100",
        "-arch=sm_120",
    )
    assert _archs.gencodes(cmd) == {
        "compute_80:sm_80",
        "compute_90:sm_90",
        "compute_90:compute_90",
        "compute_100:sm_100",
        "compute_120:sm_120",
        "compute_120:compute_120",
    }


def test_check_gencodes_accepts_exact_and_rejects_extra_or_missing():
    good = [nvcc_cmd("-gencode", "arch=compute_90,code=sm_90"), Command("cxx", "/x/a.cpp", ())]
    _archs.check_gencodes(good, ["90"])
    both = ("-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90")
    extra = [nvcc_cmd(*both)]
    with pytest.raises(FaShimError) as exc:
        _archs.check_gencodes(extra, ["90"])
    assert "flash_fwd_hdim128_bf16_sm80.cu: compute_80:sm_80, compute_90:sm_90" in exc.value.details
    with pytest.raises(FaShimError):
        _archs.check_gencodes([nvcc_cmd()], ["90"])  # torch added nothing, upstream nothing


def test_the_archs_a_wheel_records_read_torchs_one_token_gencode_as_upstreams_pairs(monkeypatch):
    """Issue 55's K3: for a setup.py that passes no -gencode (the sample's CUDAExtension) torch's
    cpp_extension writes `-gencode=arch=...,code=...`, one token (these are real torch's, from
    TORCH_CUDA_ARCH_LIST as fa-shim sets it); upstream FA2's setup.py writes `-gencode VALUE`
    pairs (tests/e2e/test_real_sdist.py). Both record their archs: two builds of one name for
    sm_80 and sm_90 are told apart in the wheel cache (tests/unit/fleet/test_wheel_cache.py)."""
    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0a")
    torchs = cpp_extension._get_cuda_arch_flags()
    assert all(flag.startswith("-gencode=arch=") for flag in torchs), torchs
    assert _archs.compiled([nvcc_cmd(*torchs), Command("cxx", "/x/a.cpp", ())]) == ["80", "90a"]
    upstream = nvcc_cmd("-gencode", "arch=compute_80,code=sm_80", "-arch=sm_100")
    assert _archs.compiled([upstream, nvcc_cmd(torchs[1])]) == ["100", "80", "90a"]
    assert _archs.compiled([nvcc_cmd()]) == []  # a CPU build: no GPU code
