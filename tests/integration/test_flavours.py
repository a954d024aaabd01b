"""Flavours as plug-ins: a third flavour, written against the interface alone
(tests/packages/demo-flavour, found through its `fa_shim.flavours` entry point), builds the
sample sdist through real pip, given by a setting of its own (demo-sdist); the registry lists it
and its setting, refuses an unknown name with the known ones, and verify reads a wheel's flavour
from its .dist-info."""

from __future__ import annotations

import json
import zipfile

import pytest
from conftest import SAMPLE_VERSION, TESTS, clean_env, pip_wheel_cmd, run

pytestmark = pytest.mark.slow

DEMO = TESTS / "packages" / "demo-flavour"
PYPROJECT = """\
[build-system]
requires = ["setuptools>=70", "wheel", "packaging", "ninja", "pyelftools"]
build-backend = "fa_backend"
backend-path = ["."]

[project]
name = "fa-shim-demo"
dynamic = ["version", "dependencies"]

[tool.fa-shim]
flavour = "demo"
"""


@pytest.fixture
def demo_project(tmp_path):
    """A project of the demo flavour, reaching fa_backend as flash-attn-3/ does (a link)."""
    from conftest import REPO

    project = tmp_path / "demo"
    project.mkdir()
    (project / "pyproject.toml").write_text(PYPROJECT)
    (project / "fa_backend").symlink_to(REPO / "fa_backend")
    return project


def test_a_third_flavour_builds_the_sample_through_real_pip(
    host_venv, sample_sdist_dir, demo_project, tmp_path
):
    env = clean_env(PYTHONPATH=str(DEMO))  # as if the plug-in were installed
    sdist = sample_sdist_dir / f"flash_attn-{SAMPLE_VERSION}.tar.gz"
    out = tmp_path / "out"
    cmd = pip_wheel_cmd(host_venv, out, "-v", "-C", f"demo-sdist={sdist}", project=demo_project)
    proc = run(cmd, env=env)
    (wheel,) = out.glob("*.whl")
    assert wheel.name.startswith(f"fa_shim_demo-{SAMPLE_VERSION}+demo.")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = next(n for n in names if n.endswith(".dist-info/fa_shim_provenance.json"))
        provenance = json.loads(zf.read(info))
    assert provenance["distribution"] == "fa-shim-demo"
    assert provenance["kernel_set"] == {"label": "sample"}
    assert provenance["sources"]["file"] == sdist.name  # the flavour's own sources_key entry
    assert "flash_attn/_fa_shim_guard.py" in names  # repacked by its names, as any flavour's
    # the pipeline's own verify, through the flavour the wheel's .dist-info names
    assert f"verified {wheel.name} against torch" in proc.stdout + proc.stderr
    run([host_venv, "-m", "pip", "install", "--no-deps", wheel], env=env)
    ok = run([host_venv, "-c", "import flash_attn; print(flash_attn.check_head_dim(64))"], env=env)
    assert ok.stdout.strip() == "64"
    verify = run([host_venv, "-m", "fa_backend", "verify", wheel], env=env, cwd=demo_project)
    assert f"verify wheel {wheel}" in verify.stdout and "OK (" in verify.stdout


def test_the_registry_finds_a_plugin_and_names_the_known_flavours(host_venv, demo_project):
    script = (
        "from fa_backend.flavours import _registry\n"
        "from fa_backend.settings import _settings\n"
        "print(_registry.known())\n"
        "print(_registry.get('demo').names.dist)\n"
        "print('| `demo-sdist` |' in _settings.reference_markdown(_registry.declared()))\n"
        "try:\n    _registry.get('dmeo')\n"
        "except Exception as exc:\n    print(exc.cause)\n"
    )
    with_plugin = run(
        [host_venv, "-c", script], env=clean_env(PYTHONPATH=str(DEMO)), cwd=demo_project
    )
    known, dist, documented, error = with_plugin.stdout.splitlines()
    assert known == "['fa2', 'fa3', 'demo']" and dist == "fa-shim-demo"
    assert documented == "True"  # the setting the plug-in declares is in the reference
    assert "is not one of fa2, fa3, demo. Did you mean 'demo'?" in error
    without = run([host_venv, "-c", script], env=clean_env(), cwd=demo_project, check=False)
    assert "['fa2', 'fa3']" in without.stdout and without.returncode != 0
