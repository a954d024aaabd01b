"""The directories settings name, told to the error messages (core/_failures.name_place): a
full or unwritable disk under /tmp is then "setting wheel-cache-dir", not "TMPDIR", and its fix
names the setting that moves it. The checks that settings' paths are what they must be."""

from __future__ import annotations

from collections.abc import Sequence

from ..core import _failures
from ..core._errors import FaShimError
from ._model import Settings

_FIX = {
    "wheel-cache-dir": "make it writable for this user, name another wheel cache with "
    "-C wheel-cache-dir=DIR, or turn it off with -C wheel-cache=false.",
    "cache-dir": "make it writable for this user, or name another with -C cache-dir=DIR.",
}
_CACHES = ("cache-dir", "wheel-cache-dir")


def name(settings: Settings, existing: Sequence[str]) -> None:
    """The caches, and the directories given that must exist (`existing`: their keys)."""
    for key in (*existing, *_CACHES):
        path = getattr(settings, key.replace("-", "_"))
        if path is None:
            continue
        if path.exists() and not path.is_dir():
            raise FaShimError(
                f"the {key} {path} is a file, not a directory.",
                fix=f"point {key} at a directory (fa-shim makes a missing one).",
            )
        _failures.name_place(path, f"setting {key}", _FIX.get(key))
