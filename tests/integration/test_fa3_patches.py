"""vendored_patches/fa3/2.8.3/*.patch on the real hopper/setup.py of flash-attention v2.8.3 (from
../shared/fa3), applied by GNU patch as a build does: they apply strictly, and the patched
setup.py downloads nothing and runs no git, shown by reading it here and by running it (CUDA torch
2.11, nvcc 13.0) under fa-shim's network seal in tests/e2e/test_fa3_setup_py.py."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from fa_backend.flavours.fa3 import _releases as _fa3_releases
from fa_backend.sources import _patches

RELEASE = _fa3_releases.release("2.8.3")
# the URLs left in the patched file: documentation in comments and a warning, none fetched
DOC_URLS = {
    "https://ninja-build.org/build.ninja.html",
    "https://hub.docker.com/r/pytorch/pytorch,",
    "https://github.com/pytorch/pytorch/blob/8472c24e3b5b60150096486616d98b7bea01500b/torch/"
    "utils/cpp_extension.py#L920",
}


def _tree(fa3_trees: dict[str, Path], dest: Path, patched: bool) -> Path:
    """The hopper tree as a checkout has it (LICENSE, hopper/), patched or as upstream has it."""
    shutil.copytree(fa3_trees["hopper"], dest)
    if patched:
        _patches.apply_all(_patches.read(RELEASE.patches), dest)
    return dest


def test_each_patch_states_its_reason_and_all_apply_strictly(fa3_trees, tmp_path):
    patches = _patches.read(RELEASE.patches)
    assert [p.name for p in patches] == [
        "01-no-toolchain-download.patch",
        "02-no-git-submodule.patch",
        "03-no-wheel-download.patch",
        "04-no-readme.patch",
        "05-import-guard.patch",
        "06-headdim-dispatch.patch",
    ]
    assert all(p.reason for p in patches)
    setup = (_tree(fa3_trees, tmp_path / "src", patched=True) / "hopper" / "setup.py").read_text()
    compile(setup, "setup.py", "exec")
    assert set(re.findall(r"https?://\S+?(?=[\"')\s]|$)", setup, re.M)) == DOC_URLS
    for gone in (
        "download.nvidia.com",
        "releases/download",
        "urlretrieve",
        "urlopen",
        "download_and_copy",
        "git submodule",
        '"git"',
        'os.environ["PYTORCH_NVCC"]',
        "third_party",
    ):
        assert gone not in setup, gone
    # what fa-shim relies on is still there: the version check and upstream's switches
    assert 'bare_metal_version < Version("12.3")' in setup
    assert 'os.getenv("FLASH_ATTENTION_DISABLE_HDIM128", "FALSE")' in setup


def test_a_patch_that_does_not_fit_is_refused(fa3_trees, tmp_path):
    src = _tree(fa3_trees, tmp_path / "src", patched=True)
    from fa_backend.core._errors import FaShimError

    with pytest.raises(FaShimError, match="does not apply cleanly"):  # applied twice
        _patches.apply_all(_patches.read(RELEASE.patches[:1]), src)
