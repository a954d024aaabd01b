"""Every supported upstream release's vendored patches (and its stable-ABI line's after them) on
its real pinned sdist (from FA_SHIM_TEST_SDIST_SEED, else the package index: marked network),
applied by GNU patch as a build does: strictly, and with what fa-shim relies on afterwards (the
stable ops' schemas, parsed by torch, annotate what each op writes in place). The
pins themselves: tests/unit/flavours/fa2/test_versions.py; prepared under the CUDA torches:
tests/e2e/test_versions_prepare.py."""

from __future__ import annotations

import re

import pytest
from conftest import SUPPORTED

from fa_backend.flavours.fa2 import _releases, _sdist
from fa_backend.sources import _patches


@pytest.mark.parametrize("version", SUPPORTED)
def test_vendored_patches_apply_strictly(version, upstream_sdists, tmp_path):
    from fa_backend.flavours import _registry

    settings = _registry.load_settings(
        {"flash-attn-version": version, "sdist-dir": str(upstream_sdists), "offline": "true"}
    )
    sdist = _sdist.locate(settings)
    assert sdist.pinned
    source = _sdist.extract(sdist, tmp_path / "src")  # extract makes the directory it fills
    patches = _releases.patches(version)  # each states its Reason
    _patches.apply_all(patches, source)
    setup = (source / "setup.py").read_text()
    # after patching, every release runs `git submodule update` only inside a git clone
    assert 'os.path.isdir(".git")' in setup
    if any(p.name == "02-cuda-archs.patch" for p in patches):
        assert 'os.getenv("FLASH_ATTN_CUDA_ARCHS", "80;90")' in setup
    if version == "2.8.1":
        assert 'bare_metal_version >= Version("12.8")' in setup
    stable = _releases.release(version).stable
    if stable:  # -C torch-abi=stable: its patches apply after the release's own
        _patches.apply_all(_patches.read(stable.patches), source)
        setup = (source / "setup.py").read_text()
        assert '"csrc/flash_attn_stable/flash_api_stable.cpp",' in setup
        assert '"csrc/flash_attn/flash_api.cpp"' not in setup and "py_limited_api=True" in setup
        binding = (source / "csrc/flash_attn_stable/flash_api_stable.cpp").read_text()
        assert "STABLE_TORCH_LIBRARY(flash_attn_2_stable, m)" in binding
        assert (source / "flash_attn/_fa_shim_stable.py").is_file()
        assert _written_arguments(binding) == WRITTEN


# what each stable op writes in place, as upstream's C++ does (out, the gradients, the kv cache)
# and the flag the forwards set where upstream draws from the generator
WRITTEN = {
    "fwd": ["out", "philox_drawn"],
    "varlen_fwd": ["out", "philox_drawn"],
    "bwd": ["dq", "dk", "dv"],
    "varlen_bwd": ["dq", "dk", "dv"],
    "fwd_kvcache": ["kcache", "vcache", "out"],
}


def _written_arguments(binding: str) -> dict[str, list[str]]:
    """op -> its arguments the schema annotates as written (Tensor(a!)), by torch's own parser."""
    import torch

    block = binding[binding.index("STABLE_TORCH_LIBRARY(flash_attn_2_stable, m)") :]
    block = block[: block.index("\n}\n")]
    written = {}
    for call in re.findall(r'm\.def\(((?:\s*"[^"]*")+)\)', block):
        schema = torch._C.parse_schema("".join(re.findall(r'"([^"]*)"', call)))
        written[schema.name] = [
            a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write
        ]
    return written
