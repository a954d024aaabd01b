"""The `cuda-toolkit` setting's refusals that need no nvcc to ask: a bad setting, and offline.
The decisions against this machine's real nvccs (torch facts given as values):
tests/integration/test_toolkit_nvccs.py; provisioning from the index:
tests/e2e/test_toolkit_provision.py."""

from __future__ import annotations

import pytest
from conftest import torch_info

from fa_backend.core._errors import FaShimError
from fa_backend.settings import _settings
from fa_backend.toolchain import _toolkit


def _torch(version: str, cuda: str | None):
    return torch_info(version, cuda)


def _settings_for(tmp_path, **values) -> _settings.Settings:
    return _settings.Settings(cache_dir=tmp_path / "cache", **values)


# --------------------------------------------------------------------------------- the decision


def test_a_bad_cuda_toolkit_setting_is_one_readable_error(tmp_path):
    with pytest.raises(FaShimError) as raised:
        _toolkit.decide(_torch("2.11.0+cu130", "13.0"), _settings_for(tmp_path, cuda_toolkit="x"))
    assert "expected one of auto, system, index" in raised.value.cause


def test_offline_never_provisions(tmp_path):
    with pytest.raises(FaShimError) as raised:
        _toolkit.provision(tmp_path / "cache", "13.0", offline=True)
    assert "setting offline forbids provisioning" in raised.value.cause
    assert not (tmp_path / "cache" / "toolkits").exists()


def test_prepare_metadata_is_told_when_the_toolkit_would_come_from_the_index(tmp_path):
    """fleet/_cached.prepare looks a hit up only where choose() would fetch nothing."""
    settings = _settings_for(tmp_path, cuda_toolkit="index")
    torch = _torch("2.11.0+cu130", "13.0")
    assert _toolkit.would_download(torch, settings)
    root = _toolkit.home(settings.resolved_cache_dir, "13.0")
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (root / "bin" / "nvcc").chmod(0o755)
    (root / _toolkit.MANIFEST).write_text("{}")
    assert not _toolkit.would_download(torch, settings)  # provisioned before: reused
    assert not _toolkit.would_download(_torch("2.13.0+cpu", None), settings)
