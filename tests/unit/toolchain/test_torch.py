"""The torch probe's refusals that need no interpreter to run (fa_backend/toolchain/_torch.py):
a torch-python that does not exist. The probe itself, in a child process: tests/integration/
test_isolation.py and tests/integration/test_torch_probe.py."""

from __future__ import annotations

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.toolchain import _torch


def test_torch_python_that_does_not_exist_is_refused(tmp_path):
    with pytest.raises(FaShimError) as caught:
        _torch.probe(tmp_path / "nope" / "python")
    assert "does not exist or is not executable" in caught.value.render()
