"""build_sdist: an sdist of a fa-shim project (its pyproject.toml, the backend and the files its
flavour names, e.g. the vendored patches), so sdist -> wheel works for every project."""

from __future__ import annotations

import dataclasses
import gzip
import io
import os
import re
import tarfile
import time
from collections.abc import Mapping
from pathlib import Path

from ..core import _atomic
from ..core._errors import FaShimError
from ..core._toml import tomllib
from ..resources import CHECKOUT, PACKAGE
from ._metadata import Names


@dataclasses.dataclass(frozen=True)
class SdistSpec:
    """What a project's sdist holds besides fa_backend/ and its pyproject.toml: a flavour's
    answer (Flavour.sdist_contents)."""

    version: str  # its file name's and PKG-INFO's
    # the settings that pick the project's upstream sources, by key: written into the packed
    # pyproject.toml (a build from it picks the same), shown by doctor
    pins: Mapping[str, str]
    files: tuple[str | Path, ...]  # paths in fa-shim's checkout packed as they are (the registry)


def _files(root: Path, prefix: str) -> list[tuple[str, Path]]:
    if root.is_file():
        return [(prefix, root)]
    return [
        (f"{prefix}/{p.relative_to(root).as_posix()}", p)
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]


def _pinned(pyproject: Path, pins: dict[str, str]) -> bytes:
    """pyproject.toml as packed, naming the settings that pick the sources: a build from the
    sdist builds what it was made for."""
    text = pyproject.read_text()
    for key, value in pins.items():
        line = re.compile(rf'^{re.escape(key)}\s*=\s*"[^"]*"', re.MULTILINE)
        text, n = line.subn(f'{key} = "{value}"', text)
        if n != 1:
            raise FaShimError(
                f"{pyproject} has no single {key} line in [tool.fa-shim].",
                fix=f'add {key} = "<value>" under [tool.fa-shim].',
            )
    return text.encode()


def write(project: Path, sdist_directory: str, names: Names, spec: SdistSpec) -> str:
    """A reproducible tar.gz: sorted members, fixed owners, SOURCE_DATE_EPOCH mtimes."""
    base = f"{names.file_name}-{spec.version}"
    pyproject = project / "pyproject.toml"
    summary = tomllib.loads(pyproject.read_text()).get("project", {}).get("description", "")
    files = _files(PACKAGE, "fa_backend")
    for name in spec.files:
        path = CHECKOUT / name
        files += _files(path, Path(name).as_posix()) if path.exists() else []
    entries = [
        (f"{base}/{arcname}", p.read_bytes(), 0o755 if os.access(p, os.X_OK) else 0o644)
        for arcname, p in files
    ]
    entries.append((f"{base}/pyproject.toml", _pinned(pyproject, dict(spec.pins)), 0o644))
    pkg_info = (
        f"Metadata-Version: 2.2\nName: {names.dist}\nVersion: {spec.version}\n"
        f"Summary: {summary}\nRequires-Python: >=3.9\nDynamic: Requires-Dist\n"
    )
    entries.append((f"{base}/PKG-INFO", pkg_info.encode(), 0o644))
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))
    target = Path(sdist_directory).absolute() / f"{base}.tar.gz"  # _atomic makes the directory
    with (
        _atomic.writing(target) as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=mtime) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name, data, mode in sorted(entries):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, mtime
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return target.name
