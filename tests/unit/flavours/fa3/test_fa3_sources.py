"""FlashAttention-3's source trees: found, pinned by content, laid out
(fa_backend/flavours/fa3/_sources.py, _trees.py) and their registry (vendored_patches/fa3/,
fa_backend/flavours/fa3/_releases.py). The upstream trees come from ../shared/fa3 (the fixtures
skip without it); the registry's errors need nothing."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.flavours.fa2 import _releases
from fa_backend.flavours.fa3 import _releases as _fa3_releases
from fa_backend.flavours.fa3 import _sources as _fa3_sources
from fa_backend.flavours.fa3 import _trees
from fa_backend.flavours.fa3._trees import CUTLASS, HOPPER

RELEASE = _fa3_releases.release("2.8.3")


def _checkout(trees: dict[str, Path], dest: Path) -> Path:
    """A flash-attention clone's layout of the two trees, made with shutil, not fa-shim."""
    shutil.copytree(trees["hopper"] / "hopper", dest / "hopper")
    shutil.copy(trees["hopper"] / "LICENSE", dest / "LICENSE")
    shutil.copytree(trees["cutlass"], dest / "csrc" / "cutlass")
    (dest / "README.md").write_text("the rest of a clone, outside both trees\n")
    return dest


def _hopper_copy(trees: dict[str, Path], dest: Path) -> Path:
    shutil.copytree(trees["hopper"], dest)
    return dest


# ---------------------------------------------------------------------------------- the pin


def test_registry_pins_are_the_upstream_trees(fa3_tarballs):
    assert _trees.pin_of(fa3_tarballs["hopper"], HOPPER) == RELEASE.hopper_pin
    assert _trees.pin_of(fa3_tarballs["cutlass"], CUTLASS) == RELEASE.cutlass_pin


def test_same_pin_from_tarball_directory_its_parent_and_a_checkout(
    fa3_tarballs, fa3_trees, tmp_path
):
    cache = tmp_path / "cache"
    forms = {
        "tarballs": {"hopper": fa3_tarballs["hopper"], "cutlass": fa3_tarballs["cutlass"]},
        "tree roots": {"hopper": fa3_trees["hopper"], "cutlass": fa3_trees["cutlass"]},
        # an extracted tarball: the directory holding the one top directory
        "parents": {"hopper": fa3_trees["hopper"].parent, "cutlass": fa3_trees["cutlass"].parent},
        "checkout": {"checkout": _checkout(fa3_trees, tmp_path / "clone")},
    }
    for form, given in forms.items():
        sources = _fa3_sources.locate(RELEASE, cache, **given)
        assert (sources.hopper.pin, sources.cutlass.pin) == (
            RELEASE.hopper_pin,
            RELEASE.cutlass_pin,
        ), form
    assert sources.hopper.path == tmp_path / "clone"
    assert sources.cutlass.path == tmp_path / "clone" / "csrc" / "cutlass"


def test_one_byte_an_added_or_a_renamed_file_changes_the_pin(fa3_trees, tmp_path):
    tree = _hopper_copy(fa3_trees, tmp_path / "hopper-tree")
    api = tree / "hopper" / "flash_api.cpp"
    original = api.read_bytes()
    pins = {_trees.pin_of(tree, HOPPER)}
    assert pins == {RELEASE.hopper_pin}

    api.write_bytes(original[:1000] + bytes([original[1000] ^ 1]) + original[1001:])
    pins.add(_trees.pin_of(tree, HOPPER))
    api.write_bytes(original)
    (tree / "hopper" / "extra.h").write_text("")
    pins.add(_trees.pin_of(tree, HOPPER))
    (tree / "hopper" / "extra.h").unlink()
    api.rename(api.with_name("flash_api2.cpp"))
    pins.add(_trees.pin_of(tree, HOPPER))
    api.with_name("flash_api2.cpp").rename(api)
    assert len(pins) == 4
    assert _trees.pin_of(tree, HOPPER) == RELEASE.hopper_pin  # restored: the pin again


def test_a_changed_tree_is_one_error_naming_both_pins_and_the_fix(fa3_trees, tmp_path):
    tree = _hopper_copy(fa3_trees, tmp_path / "hopper-tree")
    setup = tree / "hopper" / "setup.py"
    setup.write_text(setup.read_text() + "# edited\n")
    with pytest.raises(FaShimError) as info:
        _fa3_sources.locate(RELEASE, tmp_path, hopper=tree, cutlass=fa3_trees["cutlass"])
    error = info.value
    assert "the hopper tree from the given hopper tree" in error.cause
    assert f"{RELEASE.tag} pins {RELEASE.hopper_pin}" in error.cause
    assert _trees.pin_of(tree, HOPPER) in error.cause
    assert RELEASE.commit in error.fix


def test_a_dirty_checkout_is_told_to_check_out_the_tag(fa3_trees, tmp_path):
    clone = _checkout(fa3_trees, tmp_path / "clone")
    (clone / "csrc" / "cutlass" / "include" / "cute" / "config.hpp").write_text("")
    with pytest.raises(FaShimError) as info:
        _fa3_sources.locate(RELEASE, tmp_path, checkout=clone)
    assert "the cutlass tree from checkout" in info.value.cause
    assert "git checkout v2.8.3 && git submodule update --init csrc/cutlass" in info.value.fix


def test_build_outputs_are_neither_pinned_nor_copied(fa3_trees, tmp_path):
    clone = _checkout(fa3_trees, tmp_path / "clone")
    outputs = [
        "hopper/build/temp.linux-x86_64-cpython-311/flash_api.o",
        "hopper/__pycache__/flash_attn_interface.cpython-311.pyc",
        "hopper/flash_attn_3.egg-info/PKG-INFO",
        "hopper/flash_attn_3/_C.abi3.so",
        "hopper/dist/flash_attn_3-3.0.0b1-cp39-abi3-linux_x86_64.whl",
    ]
    for rel in outputs:
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        (clone / rel).write_bytes(b"built")
    sources = _fa3_sources.locate(RELEASE, tmp_path, checkout=clone)
    assert sources.hopper.pin == RELEASE.hopper_pin
    hopper = _trees.lay_out(sources.trees, tmp_path / "laid-out")
    assert (hopper / "setup.py").is_file()
    for rel in outputs:
        assert not (tmp_path / "laid-out" / rel).exists(), rel
    assert not (tmp_path / "laid-out" / "README.md").exists()  # outside both trees


def test_links_are_refused(fa3_trees, tmp_path):
    tree = _hopper_copy(fa3_trees, tmp_path / "hopper-tree")
    (tree / "hopper" / "link.h").symlink_to("/etc/hostname")
    with pytest.raises(FaShimError, match="holds a link or special file"):
        _trees.pin_of(tree, HOPPER)


def test_a_checkout_without_its_submodule_names_the_git_command(fa3_trees, tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(fa3_trees["hopper"], clone)
    (clone / "csrc" / "cutlass").mkdir(parents=True)  # what a clone without --recursive has
    with pytest.raises(FaShimError) as info:
        _fa3_sources.locate(RELEASE, tmp_path, checkout=clone)
    assert "has no csrc/cutlass/include/" in info.value.cause
    assert f"git -C {clone} submodule update --init csrc/cutlass" in info.value.fix


def test_the_shared_directory_then_the_cache(fa3_tarballs, tmp_path):
    shared = fa3_tarballs["hopper"].parent
    sources = _fa3_sources.locate(RELEASE, tmp_path, shared_dir=shared)
    assert sources.hopper.origin == sources.cutlass.origin == f"directory {shared}"

    cache = _fa3_sources.cache_dir(tmp_path)
    cache.mkdir()
    for tarball in fa3_tarballs.values():
        shutil.copy(tarball, cache)
    sources = _fa3_sources.locate(RELEASE, tmp_path, shared_dir=tmp_path / "empty")
    assert sources.hopper.origin == sources.cutlass.origin == "fa-shim cache"

    # a truncated cache entry: one error, the file named
    cut = cache / fa3_tarballs["cutlass"].name
    cut.write_bytes(cut.read_bytes()[:100_000])
    with pytest.raises(FaShimError) as info:
        _fa3_sources.locate(RELEASE, tmp_path)
    assert str(cut) in info.value.cause and "not a readable .tar.gz" in info.value.cause


def test_no_sources_anywhere_names_what_to_give(tmp_path):
    with pytest.raises(FaShimError) as info:
        _fa3_sources.locate(RELEASE, tmp_path, shared_dir=tmp_path / "shared")
    assert "flash-attention-v2.8.3-hopper.tar.gz" in info.value.cause
    assert str(tmp_path / "shared") in info.value.cause
    assert "git clone --recursive" in info.value.fix


def test_laid_out_sources_are_a_checkout_with_the_same_pins(fa3_tarballs, tmp_path):
    sources = _fa3_sources.locate(
        RELEASE, tmp_path, hopper=fa3_tarballs["hopper"], cutlass=fa3_tarballs["cutlass"]
    )
    hopper = _trees.lay_out(sources.trees, tmp_path / "src")
    assert hopper == tmp_path / "src" / "hopper"
    # the header the flash-attn sdist's csrc/cutlass lacks (the reason for these trees)
    inl = "csrc/cutlass/include/cutlass/gemm/collective/builders/sm90_common.inl"
    assert (tmp_path / "src" / inl).is_file()
    again = _fa3_sources.locate(RELEASE, tmp_path, checkout=tmp_path / "src")
    assert (again.hopper.pin, again.cutlass.pin) == (RELEASE.hopper_pin, RELEASE.cutlass_pin)


def test_a_tree_changed_after_locate_is_not_laid_out(fa3_trees, tmp_path):
    tree = _hopper_copy(fa3_trees, tmp_path / "hopper-tree")
    sources = _fa3_sources.locate(RELEASE, tmp_path, hopper=tree, cutlass=fa3_trees["cutlass"])
    (tree / "hopper" / "flash.h").write_text("// changed\n")
    with pytest.raises(FaShimError, match="changed while it was copied"):
        _trees.lay_out(sources.trees, tmp_path / "src")
    assert not (tmp_path / "src").exists()  # nothing half-written


def test_a_tarball_with_two_top_directories_is_refused(fa3_trees, tmp_path):
    bad = tmp_path / "two-tops.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        tar.add(fa3_trees["hopper"] / "LICENSE", "a/LICENSE")
        tar.add(fa3_trees["hopper"] / "hopper" / "flash.h", "b/hopper/flash.h")
    with pytest.raises(FaShimError, match="more than one top directory"):
        _trees.pin_of(bad, HOPPER)


# ------------------------------------------------------------------------------ the registry


def test_the_registry_sits_below_the_fa2_releases():
    assert _fa3_releases.known() == ["2.8.3", "main-0251105a"]  # by date
    assert RELEASE.tag == "v2.8.3" and RELEASE.commit.startswith("060c9188")
    assert RELEASE.cutlass_commit.startswith("dc481792")
    assert not any(v.startswith("fa3") for v in _releases.known())  # FA2's list is unchanged


def test_an_unknown_version_lists_the_known_ones():
    with pytest.raises(FaShimError) as info:
        _fa3_releases.release("2.8.2")
    assert "flash-attention 2.8.2" in info.value.cause and "2.8.3" in info.value.fix


def test_a_malformed_release_is_one_error_naming_each_problem(tmp_path):
    directory = tmp_path / "2.9.0"
    directory.mkdir()
    (directory / "release.toml").write_text(
        'tags = "v2.9.0"\ncommit = "060c9188"\nhopper-tree = "E139"\n'
        'cutlass-commit = "dc4817921edda44a549197ff3a9dcf5df0636e7b"\n'
    )
    with pytest.raises(FaShimError) as info:
        _fa3_releases.load(directory)
    cause = info.value.cause
    assert "unknown key 'tags' (did you mean 'tag'?)" in cause
    assert "tag is missing" in cause and "cutlass-tree is missing" in cause
    assert "commit = '060c9188' is not" in cause and "hopper-tree = 'E139' is not" in cause
    assert "keys are tag (" in info.value.fix


def test_a_release_toml_that_is_not_toml_is_one_error(tmp_path):
    directory = tmp_path / "2.9.0"
    directory.mkdir()
    (directory / "release.toml").write_text('tag = "v2.9.0\n')
    with pytest.raises(FaShimError, match="is not valid TOML") as info:
        _fa3_releases.load(directory)
    assert info.value.fix == "correct its syntax (docs/fa3-design.md)."
