"""Reading built modules in-process (fa_backend/verify/_elf.py, _verify.py): the exports of this
interpreter's torch libraries through their ELF hash tables, and a file that is no ELF refused.
`python -m fa_backend verify` on real modules and wheels: tests/integration/test_verify.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CHECK_FAIL_NEW, CHECK_FAIL_OLD

from fa_backend.core._errors import FaShimError
from fa_backend.verify import _elf, _verify


def system_torch_lib() -> Path:
    import torch

    return Path(torch.__file__).parent / "lib"


def test_resolution_uses_torchs_hash_tables():
    """The new-ABI torchCheckFail is exported by this torch's libc10; the old-ABI one is not."""
    with _elf.TorchExports(system_torch_lib()) as exports:
        assert "libc10.so" in exports.libs and "libtorch_cpu.so" in exports.libs
        assert exports.provider(CHECK_FAIL_NEW) == "libc10.so"
        assert exports.provider(CHECK_FAIL_OLD) is None
        assert exports.provider("_ZN3c1017no_such_function_Ev") is None
        # Undefined in libtorch_cpu (it imports it from libc10): only definitions count.
        assert exports.provider("strlen") is None


def test_not_an_elf_file(tmp_path):
    bogus = tmp_path / "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so"
    bogus.write_text("not an ELF file\n")
    with pytest.raises(FaShimError, match="not a readable ELF shared object"):
        _verify.verify_path(bogus)
