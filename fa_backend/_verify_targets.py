"""What verify reads from the thing it is given: a wheel file, an installed flash-attn
distribution (by name or site-packages directory) or a bare module; its tags, its
flash_attn_2_cuda*.so files and fa-shim's provenance, without importing any of it."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import zipfile
from pathlib import Path

from packaging import tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from ._errors import FaShimError
from ._runtime_guard import PROVENANCE

MODULE = "flash_attn_2_cuda"


@dataclasses.dataclass
class Target:
    description: str
    kind: str
    tags: frozenset[tags.Tag] | None  # None: nothing says (a bare module)
    tag_source: str
    modules: list[tuple[str, Path]]  # (name as shipped, readable path)
    provenance: dict | None
    provenance_error: str | None = None


def _parse_provenance(text: str | None, where: str) -> tuple[dict | None, str | None]:
    if text is None:
        return None, None
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return data, None
    except ValueError as exc:
        return None, f"{where} is not valid JSON ({exc})"


def _is_module(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.startswith(MODULE + ".") and base.endswith(".so")


def wheel_target(wheel: Path, scratch: Path) -> Target:
    try:
        _, _, _, wheel_tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise FaShimError(
            f"{wheel.name} is not a valid wheel file name ({exc}).",
            fix="pass the wheel under the name it was built with.",
        ) from None
    modules, provenance_text, where, has_package = [], None, PROVENANCE, False
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                parts = info.filename.split("/")
                has_package = has_package or (len(parts) > 1 and parts[0] == "flash_attn")
                if len(parts) == 1 and _is_module(info.filename):
                    target = scratch / info.filename
                    with zf.open(info) as src, target.open("wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
                    modules.append((info.filename, target))
                elif len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == PROVENANCE:
                    provenance_text, where = zf.read(info).decode("utf-8", "replace"), info.filename
    except (zipfile.BadZipFile, OSError) as exc:
        raise FaShimError(
            f"{wheel} is not a readable wheel ({exc}).", fix="download or build the wheel again."
        ) from None
    if not has_package:
        raise FaShimError(
            f"{wheel} is not a flash-attn wheel: it holds no flash_attn package.",
            fix="pass a flash-attn wheel (flash_attn-*.whl); verify checks nothing else.",
        )
    provenance, error = _parse_provenance(provenance_text, where)
    return Target(str(wheel), "wheel", wheel_tags, "file name", modules, provenance, error)


def _dist_target(dist, where: str) -> Target:
    wheel_text = dist.read_text("WHEEL") or ""
    dist_tags = frozenset(
        t
        for line in wheel_text.splitlines()
        if line.startswith("Tag:")
        for t in tags.parse_tag(line.split(":", 1)[1].strip())
    )
    files = [str(f) for f in dist.files or []]
    modules = [(f, Path(dist.locate_file(f))) for f in files if "/" not in f and _is_module(f)]
    if not files:  # no RECORD: look next to the package
        site = Path(dist.locate_file(""))
        modules = [(p.name, p) for p in sorted(site.glob(f"{MODULE}.*.so"))]
    provenance, error = _parse_provenance(dist.read_text(PROVENANCE), PROVENANCE)
    name = f"{dist.metadata['Name']} {dist.version}"
    return Target(
        f"{name} in {where}",
        "installed",
        dist_tags or None,
        "WHEEL",
        modules,
        provenance,
        error,
    )


def installed_target(spec: str) -> Target:
    from importlib import metadata

    path = Path(spec)
    if spec in ("flash_attn", "flash-attn") and not path.exists():
        for name in ("flash-attn", "flash_attn"):
            try:
                dist = metadata.distribution(name)
            except metadata.PackageNotFoundError:
                continue
            return _dist_target(dist, str(Path(dist.locate_file("")).resolve()))
        raise FaShimError(
            f"no flash-attn distribution is installed for {sys.executable}.",
            fix="install it first, name the environment's interpreter with --python, or pass "
            "the wheel, site-packages directory or flash_attn_2_cuda*.so to verify.",
        )
    site = path.resolve()
    for dist in metadata.distributions(path=[str(site)]):
        if (dist.metadata["Name"] or "").lower().replace("_", "-") == "flash-attn":
            return _dist_target(dist, str(site))
    modules = [(p.name, p) for p in sorted(site.glob(f"{MODULE}.*.so"))]
    if not modules:
        raise FaShimError(
            f"{site} holds neither a flash-attn distribution nor a {MODULE}*.so.",
            fix="pass the site-packages directory flash-attn is installed in.",
        )
    return Target(str(site), "module", None, "", modules, None)


def module_target(path: Path) -> Target:
    """A bare flash_attn_2_cuda*.so: no tags, no provenance."""
    if not _is_module(path.name):
        raise FaShimError(
            f"{path.resolve()} is not a flash-attn module: verify checks {MODULE}*.so only.",
            fix=f"pass the {MODULE}*.so of a flash-attn install, its wheel or its "
            "site-packages directory.",
        )
    return Target(str(path.resolve()), "module", None, "", [(path.name, path)], None)
