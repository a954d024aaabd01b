"""What verify reads from the thing it is given: a wheel file, an installed flash-attn
distribution (by name or site-packages directory) or a bare module; its tags, its
flash_attn_2_cuda*.so files and fa-shim's provenance, without importing any of it."""

from __future__ import annotations

import dataclasses
import email
import json
import shutil
import sys
import zipfile
from pathlib import Path

from packaging import tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from ..core._errors import FaShimError
from ..flavours import _registry
from ..flavours._interface import Flavour
from ..resources.runtime_guard import PROVENANCE


@dataclasses.dataclass
class Target:
    description: str
    kind: str
    tags: frozenset[tags.Tag] | None  # None: nothing says (a bare module)
    modules: list[tuple[str, Path]]  # (name as shipped, readable path)
    provenance: dict | None
    flavour: Flavour  # the wheel's, the distribution's or the module's own: never assumed
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


def _is_module(name: str, flavour: Flavour) -> bool:
    """flash_attn_2_cuda.<suffix>.so at the top; flash_attn_3/_C.<suffix>.so in its package."""
    return name.startswith(flavour.names.module_path + ".") and name.endswith(".so")


def _flavour_of_wheel(infos: list[zipfile.ZipInfo]) -> Flavour | None:
    """By the distribution its .dist-info names, else by the packages it holds."""
    tops = {i.filename.split("/")[0] for i in infos if "/" in i.filename}
    dists = (
        t.removesuffix(".dist-info").rsplit("-", 1)[0] for t in tops if t.endswith(".dist-info")
    )
    return next(filter(None, map(_registry.of_dist, dists)), None) or _registry.of_package(tops)


def wheel_target(wheel: Path, scratch: Path) -> Target:
    try:
        _, _, _, wheel_tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise FaShimError(
            f"{wheel.name} is not a valid wheel file name ({exc}).",
            fix="pass the wheel under the name it was built with.",
        ) from None
    modules, provenance_text, where = [], None, PROVENANCE
    try:
        with zipfile.ZipFile(wheel) as zf:
            infos = zf.infolist()
            flavour = _flavour_of_wheel(infos)
            for info in infos if flavour else ():
                parts = info.filename.split("/")
                if _is_module(info.filename, flavour):
                    target = scratch / info.filename  # FA3's sits in its package directory
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(info) as src, target.open("wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
                    modules.append((info.filename, target))
                elif len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == PROVENANCE:
                    provenance_text, where = zf.read(info).decode("utf-8", "replace"), info.filename
    except (zipfile.BadZipFile, OSError) as exc:
        raise FaShimError(
            f"{wheel} is not a readable wheel ({exc}).", fix="download or build the wheel again."
        ) from None
    if not flavour:
        raise FaShimError(
            f"{wheel} is not a flash-attn wheel: it holds no flash_attn or flash_attn_3 package.",
            fix="pass a flash-attn or flash-attn-3 wheel; verify checks nothing else.",
        )
    provenance, error = _parse_provenance(provenance_text, where)
    return Target(str(wheel), "wheel", wheel_tags, modules, provenance, flavour, error)


def _dist_target(dist, flavour: Flavour, where: str) -> Target:
    wheel = email.message_from_string(dist.read_text("WHEEL") or "")  # headers, as pip reads it
    dist_tags = frozenset(t for v in wheel.get_all("Tag", []) for t in tags.parse_tag(v.strip()))
    files = [str(f) for f in dist.files or []]
    modules = [(f, Path(dist.locate_file(f))) for f in files if _is_module(f, flavour)]
    if not files:  # no RECORD: look next to the package
        modules = _modules_in(Path(dist.locate_file("")), flavour)
    provenance, error = _parse_provenance(dist.read_text(PROVENANCE), PROVENANCE)
    description = f"{dist.metadata['Name']} {dist.version} in {where}"
    return Target(description, "installed", dist_tags or None, modules, provenance, flavour, error)


def installed_target(spec: str) -> Target:
    from importlib import metadata

    path = Path(spec)
    named = next((f for f in _registry.every() if spec in (f.names.dist, f.names.file_name)), None)
    if named and not path.exists():
        try:
            dist = metadata.distribution(named.names.dist)
        except metadata.PackageNotFoundError:
            raise FaShimError(
                f"no {named.names.dist} distribution is installed for {sys.executable}.",
                fix="install it first, name the environment's interpreter with --python, or pass "
                "the wheel, site-packages directory or flash_attn_2_cuda*.so to verify.",
            ) from None
        return _dist_target(dist, named, str(Path(dist.locate_file("")).resolve()))
    site = path.resolve()
    for dist in metadata.distributions(path=[str(site)]):
        flavour = _registry.of_dist(dist.metadata["Name"] or "")
        if flavour:
            return _dist_target(dist, flavour, str(site))
    for flavour in _registry.every():  # no distribution: a module by its flavour's name
        modules = _modules_in(site, flavour)
        if modules:
            return Target(str(site), "module", None, modules, None, flavour)
    raise FaShimError(
        f"{site} holds neither a flash-attn distribution nor a {_module_names()}.",
        fix="pass the site-packages directory flash-attn is installed in.",
    )


def _modules_in(site: Path, flavour: Flavour) -> list[tuple[str, Path]]:
    found = sorted(site.glob(f"{flavour.names.module_path}.*.so"))
    return [(p.relative_to(site).as_posix(), p) for p in found]


def _module_names() -> str:
    return " or a ".join(f"{f.names.module_path}*.so" for f in _registry.every())


def module_target(path: Path) -> Target:
    """A bare module (flash_attn_2_cuda*.so, flash_attn_3/_C*.so): no tags, no provenance; its
    flavour is the one whose module it is by name."""
    for flavour in _registry.every():
        shipped = "/".join(path.absolute().parts[-1 - flavour.names.module_path.count("/") :])
        if _is_module(shipped, flavour):
            return Target(str(path.resolve()), "module", None, [(shipped, path)], None, flavour)
    raise FaShimError(
        f"{path.resolve()} is not a flash-attn module: verify checks {_module_names()} only.",
        fix="pass the module of a flash-attn install, its wheel or its site-packages directory.",
    )
