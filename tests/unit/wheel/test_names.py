"""The names a distribution's files carry (Names, fa_backend/wheel/_metadata.py): each flavour's
Names, and what the metadata, the repack, verify and the runtime guard derive from it."""

from __future__ import annotations

import pytest
from packaging.utils import canonicalize_name

from fa_backend.flavours.fa2._flavour import FLAVOUR as FA2
from fa_backend.flavours.fa3._flavour import FLAVOUR as FA3
from fa_backend.wheel._metadata import Names


def test_flash_attn_file_name_module_path_and_guard():
    names = FA2.names
    assert names.file_name == "flash_attn"
    assert names.module_path == "flash_attn_2_cuda"  # a top-level module: no package path
    assert names.guard_path == "flash_attn/_fa_shim_guard.py"
    assert names.project_label == "fa-shim's root"


def test_flash_attn_3_module_lives_in_its_package():
    names = FA3.names
    assert names.file_name == "flash_attn_3"
    assert names.module_path == "flash_attn_3/_C"
    assert names.guard_path == "flash_attn_3/_fa_shim_guard.py"
    assert names.project_label == "flash-attn-3/ (flavour fa3)"
    assert names.abi3 and not FA2.names.abi3


@pytest.mark.parametrize("dist", ["flash-attn", "flash-attn-3", "fa-shim-demo"])
def test_the_file_name_is_the_distribution_name_as_pep_427_spells_it(dist):
    names = Names("x", dist, "pkg", "pkg._C", abi3=False)
    assert canonicalize_name(names.file_name) == canonicalize_name(dist)
    assert "-" not in names.file_name


def test_names_are_values():
    a = Names("fa2", "flash-attn", "flash_attn", "flash_attn_2_cuda", abi3=False)
    assert a == FA2.names and hash(a) == hash(FA2.names)
    with pytest.raises(AttributeError):
        a.dist = "other"  # frozen: one flavour's names cannot drift
