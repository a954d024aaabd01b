"""The import guard fa-shim ships as flash_attn/_fa_shim_guard.py (fa_backend/resources/
runtime_guard.py): what counts as a different torch, and the rebuild command it names from what
pip recorded. The guard in an installed wheel and the patches that use it:
tests/integration/test_import_guard.py."""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

import pytest

from fa_backend.resources import runtime_guard

BUILT = {"version": "2.11.0+cu130", "cuda": "13.0", "cxx11_abi": 1}


@pytest.mark.parametrize(
    "running, differs",
    [
        ({"version": "2.11.0", "cuda": "13.0", "cxx11_abi": 1}, []),  # local label ignored
        ({"version": "2.11.0+cu130", "cuda": "13.2", "cxx11_abi": 1}, []),  # same CUDA major
        ({"version": "2.11.1+cu130", "cuda": "13.0", "cxx11_abi": 1}, ["torch version"]),
        ({"version": "2.12.0+cu130", "cuda": "13.0", "cxx11_abi": 1}, ["torch version"]),
        ({"version": "2.11.0+cu128", "cuda": "12.8", "cxx11_abi": 1}, ["CUDA 13.0 vs 12.8"]),
        ({"version": "2.11.0+cpu", "cuda": None, "cxx11_abi": 1}, ["CUDA 13.0 vs none"]),
        ({"version": "2.11.0+cu130", "cuda": "13.0", "cxx11_abi": 0}, ["C++ ABI"]),
    ],
)
def test_what_counts_as_a_different_torch(running, differs):
    found = runtime_guard.mismatches(BUILT, running)
    assert len(found) == len(differs)
    for text, expected in zip(found, differs):
        assert expected in text


def _dist(tmp_path: Path, direct_url: dict | None) -> metadata.Distribution:
    info = tmp_path / "flash_attn-2.8.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.8.3\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return metadata.PathDistribution(info)


@pytest.mark.parametrize(
    "direct_url, source",
    [
        ({"url": "file:///srv/fa%20shim", "dir_info": {}}, "/srv/fa shim"),
        (
            {"url": "https://github.com/o/fa-shim", "vcs_info": {"vcs": "git", "commit_id": "ab"}},
            "git+https://github.com/o/fa-shim@ab",
        ),
        (
            {"url": "file:///w/flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl", "archive_info": {}},
            "/path/to/fa-shim",
        ),  # reinstalling the same wheel would not help
        (None, "/path/to/fa-shim"),
    ],
)
def test_rebuild_command_names_the_source_pip_recorded(tmp_path, direct_url, source):
    command = runtime_guard.rebuild_command(_dist(tmp_path, direct_url))
    pip = f"{sys.executable} -m pip install --no-build-isolation --no-deps --force-reinstall"
    assert command == f"{pip} {source}"


def test_a_wheel_the_team_cache_installed_names_its_install_command(tmp_path):
    """install.py installs an entry's own file, which the installer records in direct_url.json:
    the guard's fix is then that cache's install.py (with the wheel's kernel set, its name and
    --uv where uv installed it) while the cache keeps it and the entry, else the rebuild."""
    from urllib.parse import quote

    cache = tmp_path / "team fa+"
    wheel = cache / "0123abcd" / "flash_attn-2.8.3+cu130-cp311-cp311-linux_x86_64.whl"
    url = "file://" + quote(str(wheel)) + "#sha256=ab"
    dist = _dist(tmp_path, {"url": url, "archive_info": {}})
    info = Path(dist.locate_file("flash_attn-2.8.3.dist-info"))
    running = {"version": "2.13.0+cpu", "cuda": None, "cxx11_abi": 1}
    rebuild = runtime_guard._message("differs", BUILT, running, dist).splitlines()[-2:]
    assert rebuild[0].startswith("Rebuild flash-attn against the installed torch")
    assert rebuild[1].endswith("--force-reinstall /path/to/fa-shim")  # the cache is not there
    wheel.parent.mkdir(parents=True)
    (wheel.parent / "entry.json").write_text("{}")
    assert runtime_guard.team_command(dist) is None  # an entry, but no install.py beside it
    (cache / "install.py").write_text("")
    fix = runtime_guard._message("differs", BUILT, running, dist).splitlines()[-2:]
    assert fix == [
        "Install the team's flash-attn wheel for the installed torch (or its build line):",
        f"  {sys.executable} '{cache / 'install.py'}'",
    ]
    (info / runtime_guard.PROVENANCE).write_text(json.dumps({"kernel_set_name": "hdim128.bf16"}))
    (info / "INSTALLER").write_text("uv\n")
    assert runtime_guard.team_command(dist) == (
        f"{sys.executable} '{cache / 'install.py'}' --kernel-set hdim128.bf16 --uv"
    )
    stable = runtime_guard._message("x", {**BUILT, "stable_abi": "2.10"}, running, dist)
    assert stable.splitlines()[-2].startswith("or install the team's flash-attn wheel")
    (wheel.parent / "entry.json").unlink()  # a wheel file beside some install.py: not the cache's
    assert runtime_guard.team_command(dist) is None
    for bad in ("[1]", '{"url": 1}', "{", '{"url": "https://x/flash_attn.whl"}'):
        (info / "direct_url.json").write_text(bad)
        assert runtime_guard.team_command(dist) is None, bad
