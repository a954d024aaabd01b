"""A wheel-cache hit found by prepare_metadata_for_build_wheel, handed on to build_wheel: pip
runs each hook in a fresh interpreter, and planning again (settings, flavour, torch, nvcc) was
half of a hit's cost (issue 53 item 6). prepare puts the served wheel beside the metadata it
wrote, in the frontend's metadata directory, with a note naming both; build_wheel, given that
metadata directory, delivers the wheel and imports nothing else. pyproject_hooks does the same
for a backend without prepare_metadata (its PEP517_ALREADY_BUILT_WHEEL marker); this note is
fa-shim's own, read by fa-shim's hook, so no frontend's internals are relied on."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core import _atomic, _log
from ..wheel._wheelfile import publish

NOTE = "fa-shim-handed-on.json"


def give(wheel: Path, metadata_directory: str, dist_info: str) -> None:
    """Beside <metadata_directory>/<dist_info>: the served wheel, then the note (last, so a
    note always names a whole wheel). A hard link where the cache is on the same file system
    (a full FA2 wheel is ~0.5 GB; the entry's sha256 is checked on every hit, so a file changed
    through a link is found), else a copy."""
    directory = Path(metadata_directory)
    handed = directory / wheel.name
    try:
        os.link(wheel, handed)
    except OSError:  # another file system, another user's file (protected_hardlinks)
        handed = publish(wheel, directory)
    note = {"wheel": handed.name, "dist_info": dist_info}
    _atomic.write(directory / NOTE, json.dumps(note).encode())


def take(metadata_directory: str | None, wheel_directory: str) -> str | None:
    """The handed-on wheel delivered into wheel_directory (its name), or None: no metadata
    directory, no note, or a note for other metadata than the one build_wheel is given."""
    if not metadata_directory:
        return None
    prepared = Path(metadata_directory)
    try:
        note = json.loads((prepared.parent / NOTE).read_text(encoding="utf-8"))
        wheel = prepared.parent / note["wheel"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if note.get("dist_info") != prepared.name or not wheel.is_file():
        return None
    target = Path(wheel_directory).absolute() / wheel.name
    try:
        os.link(wheel, target)  # appears whole; the metadata directory is the frontend's
    except OSError:
        publish(wheel, target.parent)
    _log.info(
        f"{wheel.name}: the wheel-cache hit prepare_metadata_for_build_wheel found, handed on "
        f"({target})"
    )
    return wheel.name
