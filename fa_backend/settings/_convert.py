"""One setting's text (from -C, FA_SHIM_* or [tool.fa-shim]) as the value its kind says, or one
error naming the setting, where it came from and what was expected."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from ..core._errors import FaShimError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _absolute(text: str) -> Path:
    """A relative path is relative to where the user ran the command: a frontend (pip) runs the
    backend elsewhere, but the shell's PWD survives it."""
    path = Path(os.path.expanduser(text))
    if path.is_absolute():
        return path
    pwd = os.environ.get("PWD")
    base = Path(pwd) if pwd and os.path.isabs(pwd) and os.path.isdir(pwd) else Path.cwd()
    return Path(os.path.normpath(base / path))


def convert(key: str, kind: str, value: Any, where: str, maximum: int | None = None) -> Any:
    def bad(expected: str) -> FaShimError:
        return FaShimError(
            f"setting {key!r} from {where} is {value!r}, expected {expected}.",
            fix=f"correct {where.rsplit(' ', 1)[-1]}."
            if where.startswith("environment variable")
            else f"correct {key} in {where}.",
        )

    # An empty value is refused for every kind, never read as "unset" or "false": it is most
    # often an unset shell variable (-C cuda-archs=$ARCH), and leaving the setting out is how
    # its default is asked for.
    if (value == [] or value == ()) or (
        not isinstance(value, (bool, list, tuple)) and not str(value).strip()
    ):
        fix = (
            f"give it a value, or unset {where.rsplit(' ', 1)[-1]} for the default."
            if where.startswith("environment variable")
            else f"give {key} a value in {where}, or leave it out for the default."
        )
        raise FaShimError(
            f"setting {key!r} from {where} is empty: fa-shim refuses an empty value for every "
            "setting (an unset shell variable, most often).",
            fix=fix,
        )
    if kind in ("archs", "list"):
        items = value if isinstance(value, (list, tuple)) else re.split(r"[;,\s]+", str(value))
    if kind == "archs":
        archs = []
        for item in (str(i).strip() for i in items):
            if not item:
                continue
            # compute_XX names PTX for a virtual arch: flash-attn compiles real GPU code only
            match = re.fullmatch(r"(?:sm_)?(\d+)(?:\.(\d))?([af]?)", item)
            if not match:
                raise bad("architectures like 80, 90, 9.0, 100a or 'sm_90'")
            major, minor, suffix = match.groups()
            archs.append(f"{major}{minor or ''}{suffix}")
        return tuple(dict.fromkeys(archs))
    if kind == "list":
        return tuple(dict.fromkeys(str(i).strip().lower() for i in items if str(i).strip()))
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise bad("a single value")
        value = value[0]
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise bad("true or false")
    if kind == "int":
        try:
            number = int(str(value))
        except ValueError:
            raise bad("a positive integer") from None
        if maximum is not None and not 1 <= number <= maximum:
            raise bad(f"an integer from 1 to {maximum}")
        if number < 1:
            raise bad("a positive integer")
        return number
    if kind == "seconds":
        try:
            seconds = float(str(value))
        except ValueError:
            raise bad("a positive number of seconds") from None
        if not seconds > 0:
            raise bad("a positive number of seconds")
        return seconds
    if kind == "path":
        return _absolute(str(value).strip())
    if kind == "str":
        return str(value).strip()
    if kind == "version":
        try:
            version = Version(str(value).strip())
        except InvalidVersion:
            raise bad("a PEP 440 version such as 2.8.3 or 2.8.3.post2") from None
        # v2.8.3, 2.8.3.0 and ' 2.8.3 ' are 2.8.3; 2.8.3-post2 is 2.8.3.post2. Zeros beyond
        # major.minor.patch go (upstream's releases always have three: 2.7.0.post2 stays)
        release = list(version.release)
        while len(release) > 3 and release[-1] == 0:
            release.pop()
        full, short = ".".join(map(str, version.release)), ".".join(map(str, release))
        return str(version).replace(full, short, 1)
    raise AssertionError(kind)
