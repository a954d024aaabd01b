"""The wheel cache (fa_backend/fleet/_wheel_cache.py) in-process, on real files: a cache that
cannot keep a freshly built wheel is a warning, never a lost build. Its sweep of killed writers'
leftovers: test_wheel_cache_partials.py; shared by users and builds in real processes:
tests/integration/test_shared_cache.py, tests/integration/test_build_speed.py."""

from __future__ import annotations

import zipfile
from pathlib import Path

from fa_backend.fleet import _wheel_cache


def test_a_cache_that_cannot_keep_the_wheel_is_a_warning(tmp_path, capfd):
    """After a successful build the entry cannot be made (here: a file sits where its directory
    goes, a real OSError even for root): the user still gets the wheel, with a warning."""
    root, out = tmp_path / "cache", tmp_path / "out"
    fingerprint = {"demo": 2}
    entry = root / _wheel_cache.key(fingerprint)
    built = tmp_path / "demo-1.0-py3-none-any.whl"

    def build() -> Path:
        with zipfile.ZipFile(built, "w") as z:
            z.writestr("demo/__init__.py", "")
        entry.write_text("in the way")  # the cache breaks while the compile runs
        return built

    wheel = _wheel_cache.obtain(root, fingerprint, built.name, out, lambda w: None, build, 600, 15)
    assert wheel == out / built.name and wheel.read_bytes() == built.read_bytes()
    err = capfd.readouterr().err
    assert f"the wheel cache {root} could not keep this wheel" in err
    assert "the wheel itself is built" in err and "Traceback" not in err
