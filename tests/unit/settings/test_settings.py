"""The settings model: precedence, conversion, validation with did-you-mean."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO

from fa_backend.core._errors import FaShimError
from fa_backend.flavours import _registry
from fa_backend.settings import _settings


def _project(tmp_path: Path, table: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(f"[tool.fa-shim]\n{table}\n")
    return tmp_path


def test_precedence_config_settings_over_env_over_pyproject(tmp_path):
    project = _project(tmp_path, 'flash-attn-version = "2.8.3"\nmax-jobs = 2\nnvcc-threads = 1')
    env = {"FA_SHIM_MAX_JOBS": "3", "FA_SHIM_NVCC_THREADS": "2"}
    s = _registry.load_settings({"max-jobs": "4"}, env, project)
    assert (s.flash_attn_version, s.max_jobs, s.nvcc_threads) == ("2.8.3", 4, 2)
    s = _registry.load_settings({}, env, project)
    assert (s.max_jobs, s.nvcc_threads) == (3, 2)
    s = _registry.load_settings(None, {}, project)
    assert (s.max_jobs, s.nvcc_threads) == (2, 1)


def test_defaults_without_any_source(tmp_path):
    s = _registry.load_settings(None, {}, tmp_path)
    assert s.flash_attn_version is None and s.cuda_archs == () and s.verbose is False
    assert s.resolved_cache_dir.name == "fa-shim"


def test_the_repository_builds_the_newest_supported_release():
    """An older default sorts below the index's newer upstream release: an unpinned
    `pip install -U flash-attn` would hand the install back to upstream's setup.py."""
    from fa_backend.flavours.fa2 import _releases

    assert _registry.load_settings(None, {}, REPO).flash_attn_version == _releases.known()[-1]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("90", ("90",)),
        ("8.0;9.0", ("80", "90")),
        (["80", "sm_90"], ("80", "90")),
        ("80, 90 90", ("80", "90")),
        ("10.0a", ("100a",)),
        ("100a", ("100a",)),
    ],
)
def test_cuda_archs_accept_every_common_spelling(tmp_path, value, expected):
    assert _registry.load_settings({"cuda-archs": value}, {}, tmp_path).cuda_archs == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("TRUE", True), ("off", False), (["yes"], True), ("0", False)],
)
def test_booleans(tmp_path, value, expected):
    assert _registry.load_settings({"verbose": value}, {}, tmp_path).verbose is expected


def test_config_settings_keys_may_use_underscores_or_dashes(tmp_path):
    s = _registry.load_settings({"--max_jobs": "5"}, {}, tmp_path)
    assert s.max_jobs == 5


def test_paths_become_absolute(tmp_path, monkeypatch):
    (tmp_path / "rel" / "dir").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PWD", raising=False)
    s = _registry.load_settings({"sdist-dir": "rel/dir"}, {}, tmp_path)
    assert s.sdist_dir == tmp_path / "rel" / "dir"


def test_relative_paths_are_relative_to_where_the_user_ran_the_command(tmp_path, monkeypatch):
    """A frontend runs the backend in another directory (pip: the project); the shell's PWD
    says where the user typed `-C sdist-dir=sdists`. The error names the absolute path tried."""
    user_dir, backend_dir = tmp_path / "user", tmp_path / "project"
    (user_dir / "sdists").mkdir(parents=True)
    backend_dir.mkdir()
    monkeypatch.chdir(backend_dir)
    monkeypatch.setenv("PWD", str(user_dir))
    assert _registry.load_settings({"sdist-dir": "sdists"}, {}, backend_dir).sdist_dir == (
        user_dir / "sdists"
    )
    with pytest.raises(FaShimError) as exc:
        _registry.load_settings({"sdist-dir": "./typo"}, {}, backend_dir)
    assert f"the sdist-dir {user_dir / 'typo'} does not exist" in exc.value.cause


@pytest.mark.parametrize(
    ("given", "version"),
    [
        ("v2.8.3", "2.8.3"),
        ("2.8.3.0", "2.8.3"),
        (" 2.8.3 ", "2.8.3"),
        ("2.8.3-post2", "2.8.3.post2"),
        ("2.7.0.post2", "2.7.0.post2"),  # a pinned release: its zero stays
    ],
)
def test_flash_attn_version_is_normalised(given, version):
    assert _registry.load_settings({"flash-attn-version": given}, {}).flash_attn_version == version


def test_a_bad_environment_setting_names_its_variable():
    with pytest.raises(FaShimError) as exc:
        _registry.load_settings({}, {"FA_SHIM_MAX_JOBS": "many"})
    assert "from environment variable FA_SHIM_MAX_JOBS is 'many'" in exc.value.cause
    assert exc.value.fix == "correct FA_SHIM_MAX_JOBS."


@pytest.mark.parametrize("given", ["compute_90", "compute_80"])
def test_a_virtual_architecture_is_refused(given):
    with pytest.raises(FaShimError, match="expected architectures like 80"):
        _registry.load_settings({"cuda-archs": given}, {})


@pytest.mark.parametrize(
    ("config", "env", "table", "message"),
    [
        (
            {"cuda-arch": "90"},
            {},
            "",
            "unknown setting 'cuda-arch' in config_settings (-C). Did you mean 'cuda-archs'?",
        ),
        ({}, {"FA_SHIM_MAXJOBS": "2"}, "", "Did you mean 'FA_SHIM_MAX_JOBS'?"),
        ({}, {}, "flash-atn-version = '2.8.3'", "Did you mean 'flash-attn-version'?"),
        ({"max-jobs": "zero"}, {}, "", "expected a positive integer"),
        ({"max-jobs": "0"}, {}, "", "expected a positive integer"),
        ({"verbose": "maybe"}, {}, "", "expected true or false"),
        ({"flash-attn-version": "two"}, {}, "", "expected a PEP 440 version"),
        ({"cuda-archs": "hopper"}, {}, "", "expected architectures like"),
        ({"max-jobs": ["1", "2"]}, {}, "", "expected a single value"),
    ],
)
def test_bad_input_is_one_readable_error(tmp_path, config, env, table, message):
    project = _project(tmp_path, table)
    with pytest.raises(FaShimError) as info:
        _registry.load_settings(config, env, project)
    assert message in info.value.render()
    assert info.value.fix


def test_invalid_pyproject_is_reported(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.fa-shim\n")
    with pytest.raises(FaShimError, match="not valid TOML"):
        _registry.load_settings(None, {}, tmp_path)


def test_reference_lists_every_setting_and_its_environment_variable():
    declared = _registry.declared()  # the flavours' own settings
    table = _settings.reference_markdown(declared)
    for key in [*_settings.FIELDS, *(s.key for s in declared)]:
        assert f"| `{key}` | `{_settings.env_name(key)}` |" in table


@pytest.mark.parametrize("value", ["none", "OFF", "False", False, " no "])
def test_compiler_cache_can_be_turned_off_in_any_spelling(value):
    from fa_backend.toolchain import _compilers

    assert _compilers.compiler_cache(value) is None
