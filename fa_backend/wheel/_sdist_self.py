"""build_sdist: an sdist of fa-shim itself (backend + vendored patches), so sdist -> wheel works."""

from __future__ import annotations

import gzip
import io
import os
import re
import tarfile
import time
from pathlib import Path

from ..core import _atomic
from ..core._errors import FaShimError

# What a wheel build from the sdist needs; tests, CI and docs stay in the repository.
INCLUDE = ("pyproject.toml", "README.md", "LICENSE", "fa_backend", "vendored_patches")


def _files(root: Path) -> list[Path]:
    found = []
    for name in INCLUDE:
        path = root / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return sorted(found)


_VERSION_LINE = re.compile(r'^flash-attn-version\s*=\s*"[^"]*"', re.MULTILINE)


def _content(path: Path, root: Path, version: str) -> bytes:
    """The file as packed: pyproject.toml names the version the sdist is built for, so a
    build from it (with no settings) builds that version, not the checkout's default."""
    data = path.read_bytes()
    if path == root / "pyproject.toml":
        text, n = _VERSION_LINE.subn(f'flash-attn-version = "{version}"', data.decode())
        if n != 1:
            raise FaShimError(
                "pyproject.toml has no single flash-attn-version line in [tool.fa-shim].",
                fix='add flash-attn-version = "<version>" under [tool.fa-shim].',
            )
        data = text.encode()
    return data


def pkg_info(version: str) -> str:
    return (
        f"Metadata-Version: 2.2\nName: flash-attn\nVersion: {version}\n"
        "Summary: FlashAttention-2 built from the upstream sdist against the installed "
        "PyTorch (fa-shim)\nRequires-Python: >=3.9\nDynamic: Requires-Dist\n"
    )


DIST_NAME = "flash_attn"  # the root project's name (flash-attn) as file names spell it


def write(root: Path, sdist_directory: str, version: str) -> str:
    """A reproducible tar.gz: sorted members, fixed owners, SOURCE_DATE_EPOCH mtimes."""
    base = f"{DIST_NAME}-{version}"
    out_dir = Path(sdist_directory).absolute()
    out_dir.mkdir(parents=True, exist_ok=True)
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))
    target = out_dir / f"{base}.tar.gz"
    with (
        _atomic.writing(target) as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=mtime) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        entries = [
            (
                f"{base}/{p.relative_to(root).as_posix()}",
                _content(p, root, version),
                0o755 if os.access(p, os.X_OK) else 0o644,
            )
            for p in _files(root)
        ]
        entries.append((f"{base}/PKG-INFO", pkg_info(version).encode(), 0o644))
        for name, data, mode in sorted(entries):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, mtime
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return target.name
