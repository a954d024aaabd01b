"""The wheel declares the torch release it was built against (`Requires-Dist: torch==2.13.0+cpu`),
and `pip check` reports a different torch: the CUDA 13.0 torch 2.11.0 of the session's venv,
seen through a .pth file. The wheel is conftest's sample_wheel, built against the machine's
torch 2.13.0+cpu; what pip and uv do with it otherwise: tests/integration/
test_torch_requirement.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_venv, run

pytestmark = pytest.mark.slow


@pytest.fixture
def built(sample_wheel) -> dict:
    return sample_wheel


def test_pip_check_reports_a_different_torch(built, host_venv, torch211_python, tmp_path):
    def broken(python) -> list[str]:
        proc = run([python, "-m", "pip", "check"], check=False)
        return [line for line in proc.stdout.splitlines() if line.startswith("flash-attn")]

    # the torch it was built for (the system's 2.13.0+cpu, seen through the venv): not broken
    run([host_venv, "-m", "pip", "install", "-q", "--no-deps", built["wheel"]])
    assert broken(host_venv) == []

    # a venv whose torch is 2.11.0 (the session's torch venv, seen through a .pth file)
    other = make_venv(tmp_path / "t211", [])
    site = run(
        [torch211_python, "-c", "import os, torch; print(os.path.dirname(torch.__path__[0]))"]
    ).stdout.strip()
    purelib = run([other, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    Path(purelib.stdout.strip(), "torch211.pth").write_text(site + "\n")
    run([other, "-m", "pip", "install", "-q", "--no-deps", built["wheel"]])
    assert broken(other) == [
        "flash-attn 0.1.0+cputorch2.13cxx11abitrue has requirement torch==2.13.0+cpu, but you "
        "have torch 2.11.0."
    ]
