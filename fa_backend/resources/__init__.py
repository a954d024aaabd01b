"""Files fa-shim runs by path or ships inside a wheel (standard library only, never importing
fa_backend), and every path fa-shim computes from its own location: one place for them."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "upstream_driver.py"  # runs upstream setup.py in the child interpreter
LAUNCHER = HERE / "launcher.py"  # stands in front of every compiler of the upstream build
SESSION = HERE / "process_session.py"  # runs a probe in a session that ends with the backend
GUARD = HERE / "runtime_guard.py"  # shipped in every wheel as <package>/_fa_shim_guard.py
INSTALLER = HERE / "team_install.py"  # kept in every wheel cache's root as install.py
PACKAGE = HERE.parent  # fa_backend/ itself (symlinks resolved: flash-attn-3/ shares it)
CHECKOUT = PACKAGE.parent  # fa-shim's checkout or sdist: pyproject.toml, vendored_patches/
VENDORED = CHECKOUT / "vendored_patches"
PYPROJECT = CHECKOUT / "pyproject.toml"
# the project whose fa_backend runs (symlinks kept: flash-attn-3/ when reached through its link)
PROJECT = Path(__file__).absolute().parent.parent.parent
