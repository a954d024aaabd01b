"""An out-of-memory kill is retried with fewer of the heavy units at once (issue 24), through real
pip and ninja: a plug-in flavour (the demo flavour of tests/packages with a memory model) builds
the sample sdist with two extra C++ units it calls heavy, each expected to take 30 % of this
machine's memory, so the plan lets both run at once; the compiler wrapper tests/tools/oom-once-g++
plays the OOM killer on the first compile. The retry caps the heavy class at one unit at a time
with a ninja pool in build.ninja, keeps the jobs, says so, and the wheel is built."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import SAMPLE_VERSION, TESTS, TOOLS, clean_env, pip_wheel_cmd, run

pytestmark = pytest.mark.slow

DEMO = TESTS / "packages" / "demo-flavour"
PLUGIN = '''\
"""The demo flavour, with two heavy units and a memory model (tests/integration/
test_oom_heavy_retry.py)."""
from fa_shim_demo_flavour import Demo

from fa_backend.flavours.api import Costs, Names
from fa_backend.toolchain import _jobs

HEAVY = ("heavy_a.cpp", "heavy_b.cpp")


class Heavy(Demo):
    names = Names("heavy", "fa-shim-heavy", "flash_attn", "flash_attn_2_cuda", abi3=False)

    def lay_out(self, plan, tools, dest):
        root = super().lay_out(plan, tools, dest)
        for name in HEAVY:
            (root / "csrc" / name).write_text(f"int {name[:-4]}() {{ return 1; }}\\n")
        return root

    def driver_spec(self, plan, tools, source):
        return {"split_sources": {"flash_api.cpp": ["flash_api.cpp", *HEAVY]}}

    def costs(self, plan):
        share = _jobs.available_memory() * 3 // 10
        return Costs(None, lambda name: share if name in HEAVY else 64 * 2**20)


FLAVOUR = Heavy()
'''
PYPROJECT = """\
[build-system]
requires = ["setuptools>=70", "wheel", "packaging", "ninja", "pyelftools"]
build-backend = "fa_backend"
backend-path = ["."]

[project]
name = "fa-shim-heavy"
dynamic = ["version", "dependencies"]

[tool.fa-shim]
flavour = "heavy"
"""


@pytest.fixture
def heavy_project(tmp_path) -> tuple[Path, Path]:
    from conftest import REPO

    plugin = tmp_path / "plugin"
    info = plugin / "fa_shim_heavy_flavour-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fa-shim-heavy-flavour\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        "[fa_shim.flavours]\nheavy = fa_shim_heavy_flavour:FLAVOUR\n"
    )
    (plugin / "fa_shim_heavy_flavour.py").write_text(PLUGIN)
    # the demo's module alone, not its entry point: only `heavy` is registered, and it declares
    # the demo's setting (demo-sdist) as its own
    shutil.copy(DEMO / "fa_shim_demo_flavour.py", plugin)
    project = tmp_path / "heavy"
    project.mkdir()
    (project / "pyproject.toml").write_text(PYPROJECT)
    (project / "fa_backend").symlink_to(REPO / "fa_backend")
    return project, plugin


def test_an_oom_kill_is_retried_with_fewer_heavy_units_at_once(
    host_venv, sample_sdist_dir, heavy_project, tmp_path
):
    project, plugin = heavy_project
    marker = tmp_path / "killed-once"
    env = clean_env(
        PYTHONPATH=str(plugin),
        CXX=str(TOOLS / "oom-once-g++"),
        OOM_ONCE_MARKER=str(marker),
        TMPDIR=str(tmp_path),  # the kept build directory goes with the test's own
    )
    sdist = sample_sdist_dir / f"flash_attn-{SAMPLE_VERSION}.tar.gz"
    settings = ["-C", f"demo-sdist={sdist}", "-C", "wheel-cache=false"]
    settings += ["-C", "compiler-cache=none"]
    settings += ["-C", "keep-build-dir=true"]
    out = tmp_path / "out"
    proc = run(pip_wheel_cmd(host_venv, out, "-v", *settings, project=project), env=env)
    log = proc.stdout + proc.stderr
    assert marker.exists(), "the wrapper never killed itself"
    plan = re.search(
        r"compile plan: (\d+) job\(s\), every unit free to run beside every other", log
    )
    assert plan, log[-3000:]
    jobs = int(plan.group(1))
    retry = re.search(
        r"a compiler was killed for lack of memory; retrying with at most 1 of the 2 units of "
        rf"(\d+) GiB at once, {jobs} job\(s\), keeping the \d+ object\(s\) already compiled",
        log,
    )
    assert retry, log[-3000:]
    # the retry's build.ninja: the heavy class in a pool of depth 1, the light unit free
    kept = Path(re.findall(r"kept the build directory (\S+)", log)[-1])
    (ninja,) = kept.rglob("build.ninja")
    text = ninja.read_text()
    pool = f"fa_shim_mem_{retry.group(1)}g"
    assert f"pool {pool}\n  depth = 1\n" in text
    for name in ("heavy_a", "heavy_b"):
        assert re.search(rf"{name}\.cpp\n  pool = {pool}\n", text), text
    assert not re.search(r"flash_api\.cpp\n  pool", text)
    assert len(list(out.glob("fa_shim_heavy-*.whl"))) == 1
