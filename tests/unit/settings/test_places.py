"""The places settings name (settings/_settings) and the loose settings of issue 25: a directory
setting that is a file, an empty path, an absurd thread count, and failures named by the setting
that moves them."""

from __future__ import annotations

from pathlib import Path

import pytest

from fa_backend.core import _failures
from fa_backend.core._errors import FaShimError
from fa_backend.flavours import _registry


def _load(tmp_path: Path, config: dict, environ: dict | None = None):
    (tmp_path / "pyproject.toml").write_text('[tool.fa-shim]\nflash-attn-version = "2.8.3"\n')
    return _registry.load_settings(config, environ or {}, tmp_path)


def test_a_wheel_cache_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(FaShimError, match="is a file, not a directory"):
        _load(tmp_path, {"wheel-cache-dir": str(tmp_path / "f")})


@pytest.mark.parametrize("where", ["config", "environment"])
def test_an_empty_path_is_an_error_wherever_it_comes_from(tmp_path, where):
    config, environ = ({"sdist": ""}, {}) if where == "config" else ({}, {"FA_SHIM_SDIST": ""})
    with pytest.raises(FaShimError, match="is empty"):
        _load(tmp_path, config, environ)


def test_nvcc_threads_has_a_range(tmp_path):
    assert _load(tmp_path, {"nvcc-threads": "32"}).nvcc_threads == 32
    for bad in ("33", "999999", "0"):
        with pytest.raises(FaShimError, match="an integer from 1 to 32"):
            _load(tmp_path, {"nvcc-threads": bad})


def test_a_failure_under_tmp_names_the_setting_not_tmpdir(tmp_path):
    cache = tmp_path / "wheels"
    _load(tmp_path, {"wheel-cache-dir": str(cache)})
    place = _failures.where_it_is(cache / "key", cache / "key" / "x.whl")
    assert place.endswith("(setting wheel-cache-dir)") and "TMPDIR" not in place
    error = _failures.from_oserror(PermissionError(13, "Permission denied", str(cache / "x")))
    assert "-C wheel-cache=false" in error.fix and "TMPDIR" not in error.fix


def test_a_pyproject_error_names_its_full_path(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.fa-shim]\nmax-jbos = 2\n")
    with pytest.raises(FaShimError) as info:
        _registry.load_settings({}, {}, tmp_path)
    assert f"[tool.fa-shim] of {tmp_path / 'pyproject.toml'}" in info.value.cause
