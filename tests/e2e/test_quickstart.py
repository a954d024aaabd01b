"""The README's quick start, verbatim: its main-job line, read from README.md itself, run by bash
in a fresh `python3 -m venv` (no system site-packages: the venv's own pip and setuptools 65.5),
as a newcomer runs it from the checkout (conftest's session fixture `quick_start`). The real
2.8.3.post2 sdist (the default) and a tailored kernel set come through FA_SHIM_* variables (what
the README documents as the environment spelling of -C), so the compile finishes on a CI box;
the torch download (~7 GB) is part of it. tests/e2e/test_real_build.py checks the wheel it
built; that the command names every build requirement is checked without running it
(tests/unit/test_readme.py).
"""

from __future__ import annotations

import re

import pytest
import tomllib
from conftest import REPO, run
from packaging.version import Version

pytestmark = [pytest.mark.realbuild, pytest.mark.slow]

# the default release, exactly: what the quick start (which names none) must build
DEFAULT = "2.8.3.post2"
LABEL = "cu130torch2.11cxx11abiTRUE.hdim32.bf16.fwd.nodropout.noalibi.nosoftcap.nolocal.nounevenk"


def test_quick_start_verbatim_in_a_fresh_venv(quick_start):
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["fa-shim"]
    assert project["flash-attn-version"] == DEFAULT
    fresh = quick_start.fresh_freeze
    assert "setuptools==65.5" in fresh or "setuptools" not in fresh, fresh  # the newcomer's venv
    proc = quick_start.proc
    assert proc.returncode == 0, (
        f"README's quick start failed ({proc.returncode}):\n{quick_start.command}\n"
        f"--- stdout (tail)\n{proc.stdout[-4000:]}\n--- stderr (tail)\n{proc.stderr[-4000:]}"
    )
    python, env = quick_start.python, quick_start.env
    freeze = run([python, "-m", "pip", "list", "--format=freeze"]).stdout
    setuptools = re.search(r"^setuptools==(\S+)", freeze, re.M)
    assert setuptools and not setuptools.group(1).startswith("65."), freeze
    run([python, "-m", "pip", "check"])  # torch 2.11 accepts the setuptools it got
    # the README's "afterwards" lines
    imported = run(
        [python, "-c", "import flash_attn; print(flash_attn.__version__)"],
        cwd=quick_start.tmp,
        env=env,
    )
    assert imported.stdout.strip() == DEFAULT, imported.stdout  # upstream's own __version__
    shown = run([python, "-m", "pip", "show", "flash-attn"], env=env).stdout
    found = re.search(r"^Version: (\S+)$", shown, re.M)
    assert found and Version(found.group(1)) == Version(f"{DEFAULT}+{LABEL}"), shown
