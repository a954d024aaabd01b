"""What a wheel says of the torch it needs (wheel/_metadata.py): `torch==<release>` for a
torch-bound module, `torch>=<floor>` for a stable-ABI one, whose label names its CUDA major and
floor and no torch release; the abi3 tag from the Py_LIMITED_API it is compiled with."""

from __future__ import annotations

import pytest
from packaging import tags
from packaging.requirements import Requirement

from fa_backend.core._errors import FaShimError
from fa_backend.wheel import _metadata
from fa_backend.wheel._metadata import Names

FA3 = Names("fa3", "flash-attn-3", "flash_attn_3", "flash_attn_3._C", abi3=True)


def test_a_stable_module_requires_its_floor():
    requirement = Requirement(_metadata.torch_requirement("2.11.0+cu130", "2.9.0"))
    assert str(requirement) == "torch>=2.9"
    assert requirement.specifier.contains("2.14.1") and not requirement.specifier.contains("2.8.1")
    assert _metadata.torch_requirement("2.11.0+cu130", "2.9.1") == "torch>=2.9.1"
    assert _metadata.torch_requirement("2.11.0+cu130") == "torch==2.11.0"


def test_the_label_names_the_cuda_major_and_floor_only():
    assert _metadata.stable_abi_label("13.0", "2.9.0") == "cu13.torch2.9plus"
    assert _metadata.stable_abi_label("12.8", "2.10.1") == "cu12.torch2.10.1plus"
    version = _metadata.full_version("3.0.0", "g0251105a.cu13.torch2.9plus.hdim128")
    assert version == "3.0.0+g0251105a.cu13.torch2.9plus.hdim128"


@pytest.mark.parametrize(
    "limited_api, interpreter", [(None, "cp39"), ("0x03090000", "cp39"), ("0x030A0000", "cp310")]
)
def test_the_abi3_tag_is_the_limited_api_compiled_with(limited_api, interpreter):
    assert _metadata.limited_api_tag(limited_api) == interpreter
    tag = _metadata.wheel_tag(FA3, limited_api)
    assert (tag.interpreter, tag.abi) == (interpreter, "abi3")
    assert tag in set(tags.sys_tags())


def test_an_abi3_level_this_interpreter_lacks_is_one_error():
    with pytest.raises(FaShimError, match=r"no binary wheel tag .* for a cp399-abi3 module"):
        _metadata.wheel_tag(FA3, "0x03630000")
