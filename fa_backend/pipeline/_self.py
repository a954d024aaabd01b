"""fa-shim's own identity, in every fingerprint and verify record (with core/_version's
__version__): the digest of its sources."""

from __future__ import annotations

import functools
import hashlib
import os

from ..resources import PACKAGE


@functools.cache
def fa_shim_sources() -> str:
    """sha256 over fa_backend/'s own files (names and contents): `__version__` stays put across
    commits, so a changed backend must change the cache key by itself."""
    return tree_digest(str(PACKAGE))


def tree_digest(root: str) -> str:
    """sha256 over each file's path below root and its contents' sha256, in path order by parts;
    bytecode left out. Walked with strings, not pathlib: every wheel-cache hit pays this walk
    (a tenth of pathlib's time under Python 3.12; docs/benchmarks.md, lease e)."""
    files = []
    for here, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        prefix = here[len(root) + 1 :]
        for name in names:
            if not name.endswith(".pyc") and os.path.isfile(os.path.join(here, name)):
                files.append(f"{prefix}/{name}" if prefix else name)
    digest = hashlib.sha256()
    for relative in sorted(files, key=lambda f: f.split("/")):
        digest.update(relative.encode() + b"\0")
        with open(os.path.join(root, relative), "rb") as file:
            digest.update(hashlib.sha256(file.read()).digest())
    return digest.hexdigest()
