"""What verify reads from a bare module or a site-packages directory holding no distribution
(fa_backend/verify/_targets.py): the flavour whose module it is by name, never one assumed. A
wheel's flavour from its .dist-info: tests/integration/test_flavours.py."""

from __future__ import annotations

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.verify import _targets


def _module(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF")  # read only by the checks, not here
    return path


def test_a_bare_module_is_its_flavours_by_name(tmp_path):
    fa3 = _module(tmp_path / "site" / "flash_attn_3" / "_C.abi3.so")
    target = _targets.module_target(fa3)
    assert target.flavour.names.dist == "flash-attn-3"
    assert target.modules == [("flash_attn_3/_C.abi3.so", fa3)]
    fa2 = _module(tmp_path / "site" / "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so")
    assert _targets.module_target(fa2).flavour.names.dist == "flash-attn"
    with pytest.raises(FaShimError):
        _targets.module_target(_module(tmp_path / "elsewhere" / "_C.abi3.so"))


def test_a_directory_without_a_distribution_is_read_by_its_module(tmp_path):
    module = _module(tmp_path / "site" / "flash_attn_3" / "_C.abi3.so")
    target = _targets.installed_target(str(tmp_path / "site"))
    assert target.flavour.names.dist == "flash-attn-3"
    assert target.modules == [("flash_attn_3/_C.abi3.so", module)]
    with pytest.raises(FaShimError):
        _targets.installed_target(str(tmp_path))
