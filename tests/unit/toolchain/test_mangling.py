"""Which symbols torch owns and which C++ string ABI a mangled name uses
(fa_backend/toolchain/_mangling.py), the rules verify's symbol and ABI checks stand on, and the
readable names its reports show."""

from __future__ import annotations

import pytest
from conftest import CHECK_FAIL_NEW, CHECK_FAIL_OLD

from fa_backend.toolchain import _mangling


@pytest.mark.parametrize(
    "name, torch_owned, abi",
    [
        (CHECK_FAIL_OLD, True, 0),
        (CHECK_FAIL_NEW, True, 1),
        ("_ZNK2at10TensorBase4sizeEl", True, None),  # const member of at::
        ("_ZTVN5torch8autograd4NodeE", True, None),  # vtable of a torch:: class
        ("_ZThn16_N3c1010TensorImplD1Ev", True, None),  # this-adjusting thunk
        ("_Z16THPVariable_WrapRKN2at10TensorBaseE", True, None),  # torch's Python glue
        ("THPVariableClass", True, None),
        ("_ZNSt6vectorIiSaIiEE9push_backEOi", False, None),  # std::, libstdc++'s to export
        ("_ZN8pybind116detail13get_internalsEv", False, None),
        ("_ZN3foo6ClassSsEv", False, None),  # "Ss" inside an identifier is not std::string
        ("_ZN3c1013MessageLoggerC1EPKcii", True, None),
        ("cudaLaunchKernel", False, None),
    ],
)
def test_torch_symbol_and_string_abi_rules(name, torch_owned, abi):
    assert _mangling.is_torch_symbol(name) is torch_owned
    assert _mangling.string_abi(name) == abi


def test_demangle_reads_names_in_process_and_leaves_the_rest():
    readable = _mangling.demangle([CHECK_FAIL_OLD, "_ZN3foo6ClassSsEv", "cudaLaunchKernel"])
    assert readable == {
        CHECK_FAIL_OLD: "c10::detail::torchCheckFail(char const*, char const*, unsigned int, "
        "std::string const&)",
        "_ZN3foo6ClassSsEv": "_ZN3foo6ClassSsEv",  # not a valid mangled name
        "cudaLaunchKernel": "cudaLaunchKernel",
    }
