"""pipeline/_reproducible: the prefix maps (general first: GCC applies the last match) and the
provenance split (what the wheel is vs how this run made it)."""

from __future__ import annotations

from pathlib import Path

from fa_backend.flavours.fa2._flavour import FLAVOUR as FA2
from fa_backend.flavours.fa3._flavour import FLAVOUR as FA3
from fa_backend.pipeline import _reproducible
from fa_backend.toolchain._torch import TorchInfo


def _torch(site: Path) -> TorchInfo:
    return TorchInfo("2.13.0+cpu", None, 1, None, str(site / "torch"), "c++20", "python", False)


def test_the_more_specific_directory_comes_later(tmp_path):
    site = tmp_path / "venv" / "site-packages"
    source = tmp_path / "scratch" / "src"
    maps = _reproducible.prefix_maps(source, _torch(site), tmp_path / "cuda")
    olds = [old for old, _ in maps]
    assert olds == sorted(olds, key=len)
    assert dict(maps)[str(site / "torch")] == "/fa-shim/site-packages/torch"
    assert dict(maps)[str(source)] == "/fa-shim/src"
    assert dict(maps)[str(tmp_path / "cuda")] == "/fa-shim/cuda"


def test_a_path_nvcc_would_split_is_left_alone(tmp_path):
    source = tmp_path / "a,b"
    maps = dict(_reproducible.prefix_maps(source, _torch(tmp_path / "s"), None))
    assert str(source) not in maps


def test_the_flags_go_to_both_compilers():
    flags = _reproducible.flags([["/tmp/x", "/fa-shim/src"]], "c++ (Debian 12.2.0-14) 12.2.0")
    assert flags["cxx"] == ["-ffile-prefix-map=/tmp/x=/fa-shim/src"]
    assert flags["nvcc"] == ["-Xcompiler=-ffile-prefix-map=/tmp/x=/fa-shim/src"]


def test_the_wheel_keeps_what_it_is_and_the_entry_how_it_was_made():
    """Each flavour's sources entry loses the keys it names (Flavour.sources_how)."""
    fa2 = {"sha256": "ab", "pinned": True, "file": "f.tar.gz", "origin": "sdist-dir /x"}
    fa3 = {"hopper": {"pin": "p", "origin": "cache"}, "tag": "v2.8.3"}
    prov = {
        "torch": {"version": "2.11.0", "path": "/venv/torch"},
        "nvcc": {"version": "13.0", "build": "13.0.88", "path": "/c/bin/nvcc", "origin": "PATH"},
        "network_seal": "network namespace",
        "compiler_cache": "/usr/bin/ccache",
        "cuda_arch_choice": {"source": "the visible GPUs"},
        "tu_parts": 2,
    }
    what, how = _reproducible.split({**prov, FA2.sources_key: fa2}, FA2)
    assert what == {
        FA2.sources_key: {"sha256": "ab", "pinned": True, "file": "f.tar.gz"},
        "torch": {"version": "2.11.0"},
        "nvcc": {"version": "13.0", "build": "13.0.88"},
        "tu_parts": 2,
    }
    assert how[FA2.sources_key] == {"origin": "sdist-dir /x"}
    assert how["torch"] == {"path": "/venv/torch"}
    assert how["nvcc"] == {"path": "/c/bin/nvcc", "origin": "PATH"}
    assert how["network_seal"] == "network namespace" and how["compiler_cache"].endswith("ccache")
    what, how = _reproducible.split({**prov, FA3.sources_key: fa3}, FA3)
    assert what[FA3.sources_key] == {"hopper": {"pin": "p"}, "tag": "v2.8.3"}
    assert how[FA3.sources_key] == {"hopper": {"origin": "cache"}}


def test_the_option_follows_the_compilers_version():
    banner = {
        "g++ (GCC) 7.3.1 20180303 (Red Hat 7.3.1-5)": "-fdebug-prefix-map",  # devtoolset-7
        "g++ (GCC) 8.5.0 20210514 (Red Hat 8.5.0-4)": "-ffile-prefix-map",
        "c++ (Debian 12.2.0-14+deb12u1) 12.2.0": "-ffile-prefix-map",
        "clang version 9.0.1": "-fdebug-prefix-map",
        "Ubuntu clang version 16.0.6 (15)": "-ffile-prefix-map",
        "unknown": "-fdebug-prefix-map",
    }
    for text, flag in banner.items():
        assert _reproducible.map_flag(text) == flag, text
