"""tomllib, or its backport tomli before Python 3.11 (requires-python is 3.9)."""

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.9/3.10 only
    import tomli as tomllib

__all__ = ["tomllib"]
