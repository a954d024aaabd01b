"""Upstream's bdist_wheel output repacked as fa-shim's wheel: upstream's files (streamed, never
read whole into memory) with our .dist-info (METADATA, WHEEL, provenance, RECORD) and the
runtime guard."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..core._errors import FaShimError
from ..core._version import __version__
from ..wheel import _metadata
from ..wheel._wheelfile import WheelWriter
from ._provenance import GUARD, PROVENANCE

if TYPE_CHECKING:
    from ..pipeline._plan import Plan

# upstream's .dist-info files that travel into ours; the rest (METADATA, WHEEL, RECORD) we write
_KEPT_DIST_INFO = ("licenses/", "LICENSE", "AUTHORS")


def repack(plan: Plan, upstream_wheel: Path, target: Path, prov: dict) -> Path:
    """Upstream's files with our .dist-info: our METADATA, tags, provenance, RECORD."""
    writer = WheelWriter(target, plan.dist_info)
    names = plan.names
    has_module = False
    with zipfile.ZipFile(upstream_wheel) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            top = info.filename.split("/", 1)[0]
            if top.endswith(".dist-info"):
                rest = info.filename.split("/", 1)[1]
                if rest.startswith(_KEPT_DIST_INFO) or rest == "top_level.txt":
                    writer.add_stream(f"{plan.dist_info}/{rest}", _member(zf, info), info.file_size)
                continue
            has_module |= info.filename.startswith(names.module_path + ".") and (
                info.filename.endswith(".so")
            )
            mode = (info.external_attr >> 16) & 0o777 or 0o644
            writer.add_stream(info.filename, _member(zf, info), info.file_size, mode)
        if not has_module:
            raise FaShimError(
                f"the upstream wheel contains no compiled {names.module_path}*.so; it "
                f"would fail with \"No module named '{names.module}'\".",
                fix="read the build log; was FLASH_ATTENTION_SKIP_CUDA_BUILD set?",
            )
        writer.add(names.guard_path, GUARD.read_bytes())
        writer.add(f"{plan.dist_info}/METADATA", plan.metadata.encode())
        writer.add(
            f"{plan.dist_info}/WHEEL",
            _metadata.wheel_file(plan.tag, f"fa-shim {__version__}").encode(),
        )
        writer.add(
            f"{plan.dist_info}/{PROVENANCE}",
            (json.dumps(prov, indent=2, sort_keys=True) + "\n").encode(),
        )
        return writer.write()  # while upstream's wheel is open: its members stream from it


def _member(zf: zipfile.ZipFile, info: zipfile.ZipInfo):
    return lambda: zf.open(info)
