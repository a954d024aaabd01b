"""Which flavours exist and which one a project builds (fa_backend/flavours/_registry.py): fa2 and
fa3 built in, a plug-in found through its `fa_shim.flavours` entry point (the demo flavour of
tests/packages/demo-flavour, on the import path as an installed plug-in would be), an unknown
name refused with the known ones, a flavour read from the project only, each flavour refusing
the other's settings, and the flavour of a distribution or of a wheel's packages. The frontends
reaching fa_backend through flash-attn-3/'s link: tests/integration/test_fa3_layout.py; the demo
flavour building the sample through pip: tests/integration/test_flavours.py."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO

from fa_backend.core._errors import FaShimError
from fa_backend.flavours import _registry
from fa_backend.flavours.fa2._flavour import FLAVOUR as FA2
from fa_backend.flavours.fa3._flavour import FLAVOUR as FA3
from fa_backend.settings._model import Setting


@pytest.fixture(autouse=True)
def fresh_entry_points():
    """The registry scans the entry points once per process (and loads each flavour once);
    these tests change the path."""
    _registry._plugins.cache_clear()
    _registry.get.cache_clear()
    yield
    _registry._plugins.cache_clear()
    _registry.get.cache_clear()


def test_flavour_is_read_from_the_project_only(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.fa-shim]\nflavour = "fa2"\n')
    assert _registry.load_settings({}, environ={}, project_dir=tmp_path).flash_attn_version is None
    with pytest.raises(FaShimError, match="unknown setting 'flavour' in config_settings"):
        _registry.load_settings({"flavour": "fa3"}, environ={}, project_dir=tmp_path)
    with pytest.raises(FaShimError, match="unknown setting 'FA_SHIM_FLAVOUR' in the environment"):
        _registry.load_settings({}, environ={"FA_SHIM_FLAVOUR": "fa3"}, project_dir=tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.fa-shim]\nflavour = "fa4"\n')
    with pytest.raises(FaShimError, match=r"is not one of fa2, fa3\. Did you mean 'fa3'"):
        _registry.load({}, environ={}, project_dir=tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.fa-shim]\nflavor = "fa3"\n')
    with pytest.raises(FaShimError, match="Did you mean 'flavour'"):
        _registry.load_settings({}, environ={}, project_dir=tmp_path)


def test_the_repository_flash_attn_3_project_is_that_layout():
    project = REPO / "flash-attn-3"
    assert (project / "fa_backend").is_symlink()
    assert (project / "fa_backend").resolve() == (REPO / "fa_backend").resolve()
    assert _registry.load_settings({}, environ={}, project_dir=project).flavour == "fa3"
    assert _registry.load_settings({}, environ={}, project_dir=REPO).flavour == "fa2"


def test_each_flavour_refuses_the_other_flavours_settings(tmp_path):
    fa3 = REPO / "flash-attn-3"
    with pytest.raises(FaShimError, match=r"'sdist-dir' .* applies to fa-shim's root only"):
        _registry.load({"sdist-dir": str(tmp_path)}, environ={}, project_dir=fa3)
    with pytest.raises(FaShimError, match=r"'flash-attn-version' .* builds flash-attn-3\."):
        _registry.load({"flash-attn-version": "2.8.3"}, environ={}, project_dir=fa3)
    with pytest.raises(FaShimError, match="FA_SHIM_TU_PARTS"):
        _registry.load({}, environ={"FA_SHIM_TU_PARTS": "2"}, project_dir=fa3)
    with pytest.raises(FaShimError, match=r"'fa3-source' .* applies to flash-attn-3/"):
        _registry.load({"fa3-source": str(tmp_path)}, environ={}, project_dir=REPO)
    with pytest.raises(FaShimError, match=r"fa3-source-dir .* does not exist"):
        _registry.load_settings(
            {"fa3-source-dir": str(tmp_path / "no")}, environ={}, project_dir=fa3
        )


def test_fa2_and_fa3_are_built_in_and_come_first():
    assert _registry.known()[:2] == ["fa2", "fa3"]
    assert _registry.get("fa2") is FA2 and _registry.get("fa3") is FA3
    assert {f.names.flavour for f in _registry.every()} >= {"fa2", "fa3"}


@pytest.mark.parametrize(
    ("dist", "flavour"),
    [
        ("flash-attn", "fa2"),
        ("flash_attn", "fa2"),
        ("Flash-Attn-3", "fa3"),
        ("flash_attn_3", "fa3"),
    ],
)
def test_the_flavour_of_a_distribution_in_any_spelling(dist, flavour):
    assert _registry.of_dist(dist).names.flavour == flavour


def test_a_distribution_no_flavour_builds_has_none():
    assert _registry.of_dist("torch") is None


def test_a_wheels_packages_name_the_most_specific_flavour():
    """An FA3 wheel holds flash_attn_3 (and may hold flash_attn_interface), no flash_attn."""
    assert _registry.of_package({"flash_attn_3", "flash_attn_interface"}) is FA3
    assert _registry.of_package({"flash_attn", "flash_attn_2_cuda"}) is FA2
    assert _registry.of_package({"flash_attn", "flash_attn_3"}) is FA3
    assert _registry.of_package({"torch"}) is None


def test_a_plug_in_is_found_through_its_entry_point(demo_flavour, tmp_path):
    assert _registry.known() == ["fa2", "fa3", "demo"]
    assert _registry.get("demo") is demo_flavour
    assert _registry.of_dist("fa-shim-demo") is demo_flavour
    (tmp_path / "pyproject.toml").write_text('[tool.fa-shim]\nflavour = "demo"\n')
    flavour, settings = _registry.load({"demo-sdist": str(tmp_path / "x.tar.gz")}, {}, tmp_path)
    assert flavour is demo_flavour and settings.flavour == "demo"
    assert settings.demo_sdist == tmp_path / "x.tar.gz"  # a setting the plug-in declares
    with pytest.raises(FaShimError, match=r"'sdist' .* applies to fa-shim's root only"):
        _registry.load({"sdist": str(tmp_path / "x.tar.gz")}, {}, tmp_path)


def test_an_unknown_flavour_names_the_known_ones_and_the_fix(demo_flavour):
    with pytest.raises(FaShimError) as info:
        _registry.get("dmeo")
    assert info.value.cause == (
        "flavour = 'dmeo' in [tool.fa-shim] of pyproject.toml is not one of fa2, fa3, demo. "
        "Did you mean 'demo'?"
    )
    assert "install the package that provides flavour 'dmeo'" in info.value.fix


def test_an_entry_point_that_is_no_flavour_is_refused(tmp_path, monkeypatch):
    """A package declaring an fa_shim.flavours entry point that names something else."""
    (tmp_path / "not_a_flavour.py").write_text("FLAVOUR = object()\n")
    info = tmp_path / "not_a_flavour-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: not-a-flavour\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{_registry.ENTRY_POINTS}]\nbogus = not_a_flavour:FLAVOUR\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "not_a_flavour", raising=False)
    assert "bogus" in _registry.known()
    with pytest.raises(FaShimError) as raised:
        _registry.get("bogus")
    assert raised.value.cause == (
        "the entry point not_a_flavour:FLAVOUR of flavour 'bogus' is not a fa-shim Flavour."
    )
    assert raised.value.fix == "its fa_shim.flavours entry point must name a Flavour instance."
    sys.modules.pop("not_a_flavour", None)


def test_without_the_plug_in_only_the_built_ins_are_known():
    assert _registry.known() == ["fa2", "fa3"]


def test_a_plug_in_cannot_declare_a_setting_already_known(demo_flavour, monkeypatch):
    """Two flavours' keys, or a flavour's and a shared one, would read one -C value two ways."""
    for key in ("sdist", "max-jobs"):
        taken = (Setting(key, None, "path", "the demo's, clashing"),)
        monkeypatch.setattr(demo_flavour, "own_settings", taken)
        with pytest.raises(FaShimError, match=f"flavour 'demo' declares setting '{key}'"):
            _registry.declared()


def test_the_plug_ins_are_scanned_only_for_a_setting_or_flavour_no_built_in_reads(demo_flavour):
    """A built-in build reads no distribution's entry points (each hook of every hit would pay
    for the scan), and still refuses a plug-in's setting as that plug-in's, not as unknown."""
    _registry._plugins.cache_clear()
    assert _registry.load({"max-jobs": "2"}, environ={}, project_dir=REPO)[0].names.flavour == "fa2"
    assert _registry._plugins.cache_info().currsize == 0
    key = demo_flavour.own_settings[0].key
    with pytest.raises(FaShimError, match=f"'{key}' .* applies to .* only"):
        _registry.load({key: "x"}, environ={}, project_dir=REPO)
    assert _registry._plugins.cache_info().currsize == 1
