"""Names, versions, tags and the core metadata: computed once, used by prepare_metadata and
build_wheel alike, so what pip resolved is what it installs. Each flavour's one Names (index
name, import package, module, tag family, project directory) is read, never its name."""

from __future__ import annotations

import dataclasses
import tarfile
from pathlib import Path

from packaging import tags
from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ..core._errors import FaShimError
from ..resources.runtime_guard import release

ABI3_SINCE = "cp39"  # upstream's -DPy_LIMITED_API=0x03090000, where torch adds no later one


@dataclasses.dataclass(frozen=True)
class Names:
    flavour: str  # as [tool.fa-shim] `flavour` says it: "fa2", "fa3"
    dist: str  # the distribution's name on an index
    package: str  # the import package the runtime guard ships in
    module: str  # the compiled extension's import name
    abi3: bool  # one module for every CPython from its limited API's version on (cpXY-abi3)
    project: str = "."  # the directory of fa-shim's checkout that builds it

    @property
    def file_name(self) -> str:
        """The distribution's name in file names (PEP 427: - becomes _)."""
        return self.dist.replace("-", "_")

    @property
    def module_path(self) -> str:
        """The extension's path in a wheel, without its suffix: flash_attn_3/_C."""
        return self.module.replace(".", "/")

    @property
    def guard_path(self) -> str:
        return f"{self.package}/_fa_shim_guard.py"

    @property
    def project_label(self) -> str:
        """How messages name the project: fa-shim's root, or flash-attn-3/ (flavour fa3)."""
        if self.project == ".":
            return "fa-shim's root"
        return f"{self.project}/ (flavour {self.flavour})"


def limited_api_tag(limited_api: str | None) -> str:
    """The interpreter tag of a -DPy_LIMITED_API value: 0x030A0000 -> cp310 (None: cp39)."""
    if not limited_api:
        return ABI3_SINCE
    value = int(limited_api, 0)
    return f"cp{value >> 24}{(value >> 16) & 0xFF}"


def wheel_tag(names: Names, limited_api: str | None = None) -> tags.Tag:
    """This interpreter's most specific tag on plain linux (never manylinux: the wheel links the
    local torch and CUDA); for a limited-API module (FA3) <cpXY>-abi3, XY its Py_LIMITED_API."""
    interpreter = tags.interpreter_name() + tags.interpreter_version()
    since = limited_api_tag(limited_api)
    for tag in tags.sys_tags():
        if not tag.platform.startswith("linux_"):
            continue
        if names.abi3 and (tag.interpreter, tag.abi) == (since, "abi3"):
            return tag
        if not names.abi3 and tag.interpreter == interpreter and tag.abi not in ("none", "abi3"):
            return tag
    newer = f" {since[2]}.{since[3:]} or newer" if names.abi3 else ""
    raise FaShimError(
        "this interpreter has no binary wheel tag on a plain linux platform"
        + (f" for a {since}-abi3 module" if names.abi3 else "")
        + f" (first tag: {next(iter(tags.sys_tags()))}).",
        fix=f"build {names.dist} on Linux with CPython{newer}.",
    )


def full_version(upstream: str, label: str) -> str:
    version = f"{upstream}+{label}"
    Version(version)  # raises InvalidVersion on a bad label: a bug, not a user error
    return version


def wheel_filename(version: str, tag: tags.Tag, names: Names) -> str:
    name = f"{names.file_name}-{version}-{tag}.whl"
    parsed = parse_wheel_filename(name)
    assert parsed[0] == canonicalize_name(names.dist) and parsed[1] == Version(version), name
    return name


def read_pkg_info(sdist: Path) -> str:
    """PKG-INFO of the sdist, read straight from the archive (no extraction needed)."""
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            # iterate, never getmembers(): PKG-INFO comes first in an sdist, and indexing all
            # 7,500 members of flash-attn's (cutlass included) costs a second per hook
            member = next(m for m in tar if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"))
            return tar.extractfile(member).read().decode("utf-8")
    except StopIteration:
        raise FaShimError(
            f"{sdist} has no PKG-INFO: it is not an sdist.", fix="use the upstream sdist from PyPI."
        ) from None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise FaShimError(
            f"{sdist} is not a readable sdist: a corrupt or truncated archive, or no gzip'd tar "
            f"at all ({exc}).",
            fix=f"give fa-shim the upstream sdist: move {sdist} aside and put the upstream "
            "file in its place, or name it with -C sdist=FILE.",
        ) from None


def torch_requirement(torch_version: str, stable_abi: str | None = None) -> str:
    """What the wheel requires of torch: `==` the release it was compiled against (2.11.0 matches
    2.11.0+cu130 too, and PyPI's CUDA torch is unlabelled), the runtime guard's rule; a CPU torch
    (always labelled: 2.13.0+cpu) with its label, so that no frontend puts the wheel beside a
    CUDA torch, nor PyPI's CUDA torch under it; for a stable-ABI module its floor (`>=2.9`)."""
    local = Version(torch_version).local or ""
    if stable_abi:
        floor = Version(stable_abi)
        shown = f"{floor.major}.{floor.minor}" if floor.release[2:] in ((), (0,)) else str(floor)
        requirement = f"torch>={shown}"
    elif local.split(".")[0] == "cpu":
        requirement = f"torch=={release(torch_version)}+{local}"
    else:
        requirement = f"torch=={release(torch_version)}"
    Requirement(requirement)  # raises on a torch version PEP 440 cannot express: a bug
    return requirement


def stable_abi_label(cuda: str | None, stable_abi: str) -> str:
    """The torch part of a stable-ABI module's local label: its CUDA major (the libcudart.so.N
    it links) and its torch floor, no torch release: cu13.torch2.9plus."""
    floor = Version(stable_abi)
    cuda_part = f"cu{Version(cuda).major}" if cuda else "cpu"
    shown = ".".join(map(str, floor.release[:2] if floor.micro == 0 else floor.release[:3]))
    return f"{cuda_part}.torch{shown}plus"


def _is_torch(line: str) -> bool:
    if not line.lower().startswith("requires-dist:"):
        return False
    try:
        return canonicalize_name(Requirement(line.split(":", 1)[1].strip()).name) == "torch"
    except InvalidRequirement:
        return False


def core_metadata(pkg_info: str, version: str, requires_torch: str) -> str:
    """Upstream's own metadata with our version, and its `Requires-Dist: torch` narrowed to
    requires_torch (added where upstream's PKG-INFO lists none, as 2.6.3's)."""
    header, sep, body = pkg_info.partition("\n\n")
    lines = []
    for line in header.splitlines():
        if line.startswith("Version:"):
            line = f"Version: {version}"
        elif _is_torch(line):
            if any(_is_torch(seen) for seen in lines):
                continue
            line = f"Requires-Dist: {requires_torch}"
        lines.append(line)
    if not any(_is_torch(line) for line in lines):
        lines.append(f"Requires-Dist: {requires_torch}")
    text = "\n".join(lines) + sep + body
    raw, _ = parse_email(text)  # parsed the way pip and uv parse it
    if raw.get("version") != version or not raw.get("name"):
        raise FaShimError(
            "the sdist's PKG-INFO has no Name or Version field.", fix="use the upstream sdist."
        )
    return text


def wheel_file(tag: tags.Tag, generator: str) -> str:
    return f"Wheel-Version: 1.0\nGenerator: {generator}\nRoot-Is-Purelib: false\nTag: {tag}\n"
