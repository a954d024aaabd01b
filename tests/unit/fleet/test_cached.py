"""fleet/_cached.verify_once: a hit's RECORD and verify run once per exact bytes and torch."""

from __future__ import annotations

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.fleet import _cached
from fa_backend.toolchain._torch import TorchInfo


def _torch(tmp_path) -> TorchInfo:
    lib = tmp_path / "site" / "torch" / "lib"
    lib.mkdir(parents=True)
    (lib / "libtorch_cpu.so").write_bytes(b"v1")
    return TorchInfo("2.13.0", None, 1, None, str(lib.parent), "c++20", "python", False)


def test_the_same_bytes_and_torch_are_checked_once(tmp_path):
    torch, wheel, calls = _torch(tmp_path), tmp_path / "a.whl", []
    wheel.write_bytes(b"wheel")
    for _ in range(2):
        _cached.verify_once(tmp_path / "cache", wheel, torch, lambda: calls.append(1))
    assert len(calls) == 1
    wheel.write_bytes(b"wheel!")  # other bytes
    _cached.verify_once(tmp_path / "cache", wheel, torch, lambda: calls.append(1))
    (torch.lib_dir / "libtorch_cpu.so").write_bytes(b"v2, another size")  # another torch
    _cached.verify_once(tmp_path / "cache", wheel, torch, lambda: calls.append(1))
    assert len(calls) == 3


def test_a_failed_check_is_not_remembered(tmp_path):
    torch, wheel = _torch(tmp_path), tmp_path / "a.whl"
    wheel.write_bytes(b"wheel")

    def fail():
        raise FaShimError("RECORD does not match")

    for _ in range(2):
        with pytest.raises(FaShimError):
            _cached.verify_once(tmp_path / "cache", wheel, torch, fail)
    assert not (tmp_path / "cache" / "verified").exists()
