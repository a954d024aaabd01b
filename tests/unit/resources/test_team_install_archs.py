"""The team cache's install.py (fa_backend/resources/team_install.py) in-process: --archs takes
every form -C cuda-archs takes (one pattern, which the settings import), and which GPU runs which
code. In real venvs: tests/integration/test_install_py.py, tests/e2e/test_team_install.py."""

from __future__ import annotations

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.resources import team_install
from fa_backend.settings import _settings

FORMS = ["80", "8.6", "sm_90", "90a", "9.0a", "100f", "80,sm_90", "8.0;9.0 sm_100a", " 80 , 86 "]
BAD = ["sm90", "compute_90", "9.x", "hopper", "90b", "8.6.1"]


@pytest.mark.parametrize("text", FORMS)
def test_archs_takes_what_the_cuda_archs_setting_takes(text):
    """The same names, in the same order, as the setting gives its build (TC04: sm_90 and 90a
    were a ValueError in runs_on)."""
    setting = _settings.convert("cuda-archs", "archs", text, "-C")
    assert team_install.arch_names(text) == list(setting)


@pytest.mark.parametrize("text", BAD)
def test_what_the_setting_refuses_archs_refuses(text):
    with pytest.raises(FaShimError):
        _settings.convert("cuda-archs", "archs", text, "-C")
    assert team_install.arch_names(text) is None


@pytest.mark.parametrize(
    "gpu, archs, runs",
    [
        ("86", ["80"], True),  # sm_80 code runs on 8.6
        ("90", ["80"], False),  # not across a major
        ("80", ["86"], False),  # not on an older GPU
        ("90a", ["90"], True),  # a GPU named as -C cuda-archs names it is that GPU
        ("90", ["90a"], True),  # arch-specific code runs on its own GPU only
        ("100", ["90a"], False),
        ("103", ["100f"], False),  # a family suffix is arch-specific here too (no false yes)
        ("120", ["100", "120"], True),
    ],
)
def test_which_gpu_runs_which_code(gpu, archs, runs):
    assert team_install.runs_on(gpu, archs) is runs
