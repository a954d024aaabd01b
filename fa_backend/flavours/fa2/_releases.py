"""What fa-shim knows about each upstream flash-attn release: `vendored_patches/<version>/
release.toml` (sdist and sha256, CUDA-arch mechanism, kernel space, parts, patches), naming the
facts many releases share, defined once below. Every other module asks `release(version)`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import Version

from .. import api
from ..api import (
    PATCH_DIR,
    RELEASE_FILE,
    VENDORED,
    FaShimError,
    Mechanism,
    Patch,
    is_version,
    key_hint,
    patch_files,
    read_toml,
)
from ._tu_parts import PATCH as TU_PARTS_PATCH

GUIDE = "see docs/upstream-versions.md#adding-a-release"

ARCH_MECHANISMS = {
    # upstream's own variable, since 2.7.3; only these four values produce -gencode flags
    "flash-attn-cuda-archs": Mechanism(
        "FLASH_ATTN_CUDA_ARCHS", ("80", "90", "100", "120"), ("80", "90", "100", "120")
    ),
    # 2.6.3-2.7.2.post1 through fa-shim's backport of the variable (80 and 90 only)
    "cuda-archs-patch": Mechanism(
        "FLASH_ATTN_CUDA_ARCHS", ("80", "90"), ("80", "90"), "02-cuda-archs.patch"
    ),
    # older setup.py files hard-code sm_80 and sm_90 (the -gencode check at prepare time
    # reports it if a version does otherwise)
    "fixed-80-90": Mechanism(None, ("80", "90"), ("80", "90")),
}


@dataclasses.dataclass(frozen=True)
class Naming:
    """How a release names its kernel sources (fnmatch patterns on basenames)."""

    kernel: str  # one source, from its pass, head dim, dtype and causal suffix
    forward: tuple[str, ...]  # the passes a forward-only set keeps
    backward: str  # the pass a forward-only set drops
    causal: tuple[str, ...]  # the suffixes of the non-causal and causal variants
    pass_sources: str  # every source of one pass
    head_dim_sources: str  # every source of one head dim
    dtype_sources: str  # every source of one dtype
    heavy_first: tuple[str, ...]  # the slowest groups, which ninja is to start first


# Every flash-attn 2 release names its sources alike. ninja starts edges in file order, and a
# slow TU started last sets the wall time alone: the slowest groups first (measured: the kernel
# parts 1..n of a split source, then split-KV, then backward); part 0 files and flash_api.cpp
# are light and fill the slots that free up last.
FA2_NAMING = Naming(
    kernel="flash_{pass_}_hdim{head_dim}_{dtype}{causal}_sm80.cu",
    forward=("fwd", "fwd_split"),
    backward="bwd",
    causal=("", "_causal"),
    pass_sources="flash_{}_*.cu",
    head_dim_sources="flash_*_hdim{}_*.cu",
    dtype_sources="flash_*_{}_*.cu",
    heavy_first=("*.part[1-9]*of*.cu", "flash_fwd_split_*", "flash_bwd_*"),
)


@dataclasses.dataclass(frozen=True)
class KernelSpace:
    """What a release compiles, in the order labels and messages list it."""

    head_dims: tuple[str, ...]
    dtypes: tuple[str, ...]
    switches: tuple[str, ...]  # upstream's FLASHATTENTION_DISABLE_<NAME> switches
    patch: str  # the vendored patch that makes left-out kernels a clean error


KERNEL_SPACES = {
    # checked against 2.8.3's sources, dispatch and patch (2.8.3.post2: the same flash_api.cpp
    # and static_switch.h)
    "fa2": KernelSpace(
        head_dims=("32", "64", "96", "128", "192", "256"),
        dtypes=("fp16", "bf16"),
        switches=("dropout", "alibi", "softcap", "local", "uneven_k"),
        patch="20-kernel-set-dispatch.patch",
    ),
}


@dataclasses.dataclass(frozen=True)
class StableLine:
    """A release's binding on torch's stable ABI (-C torch-abi=stable): its patches apply after
    the release's own, which leaves the kernel sources, and so their objects, as they are."""

    torch_target: str  # the oldest torch the module runs on (its TORCH_TARGET_VERSION)
    patches: tuple[Path, ...]


@dataclasses.dataclass(frozen=True)
class Release:
    version: str
    sdist: str | None  # upstream's file name; None for a version fa-shim does not know
    sha256: str | None
    archs: Mechanism
    kernels: KernelSpace | None  # None: no tailored kernel sets
    tu_parts: bool  # kernel sources can be compiled in parts (_tu_parts)
    patches: tuple[Path, ...]
    naming: Naming = FA2_NAMING
    unit_table: str | None = None  # the release whose units.json its kernels share, else its own
    stable: StableLine | None = None  # None: no stable-ABI binding

    @property
    def pinned(self) -> bool:
        return self.sha256 is not None


_TYPES = {str: "a string", bool: "true or false", list: "a list", dict: "a table"}
# key: (type, what it holds, required)
_KEYS = {
    "sdist": (str, "upstream's file name, e.g. flash_attn-2.8.3.tar.gz", True),
    "sha256": (str, "the sdist's sha256 as PyPI publishes it, 64 hex digits", True),
    "archs": (str, "one of " + ", ".join(ARCH_MECHANISMS), True),
    "kernel-space": (str, f"optional, one of {', '.join(KERNEL_SPACES)}: tailored sets", False),
    "tu-parts": (bool, "optional, true or false: kernel sources compiled in parts", False),
    "patches": (list, f"optional, the files in vendored_patches/{PATCH_DIR}/ it applies", False),
    "unit-table": (
        str,
        "optional, the release whose measured units.json its kernel sources share",
        False,
    ),
    "stable": (
        dict,
        "optional, [stable] torch-target (the oldest torch, e.g. 2.10.0) and patches (applied "
        "after the others): the binding on torch's stable ABI",
        False,
    ),
}


def known() -> list[str]:
    """The versions fa-shim knows: those with a release directory."""
    return sorted((p.parent.name for p in VENDORED.glob(f"*/{RELEASE_FILE}")), key=Version)


def tailorable() -> list[str]:
    """The known versions that have a kernel space (tailored sets)."""
    return [v for v in known() if release(v).kernels]


@functools.cache
def release(version: str) -> Release:
    """What fa-shim knows about a version; for an unknown one, what its version number says."""
    directory = VENDORED / version
    if not (directory / RELEASE_FILE).is_file():
        if directory.is_dir():
            raise FaShimError(
                f"{directory} has no {RELEASE_FILE}.",
                fix=f"describe the release in {directory / RELEASE_FILE} ({GUIDE}), or remove "
                "the directory.",
            )
        # unpinned, unpatched: FLASH_ATTN_CUDA_ARCHS appeared upstream in 2.7.3
        mech = "flash-attn-cuda-archs" if Version(version) >= Version("2.7.3") else "fixed-80-90"
        return Release(version, None, None, ARCH_MECHANISMS[mech], None, False, ())
    return _load(directory)


def _load(directory: Path) -> Release:
    path = directory / RELEASE_FILE
    data = read_toml(path, GUIDE)
    problems = [f"unknown key {k!r}{key_hint(k, _KEYS)}" for k in data if k not in _KEYS]
    for key, (kind, meaning, required) in _KEYS.items():
        if key in data and not isinstance(data[key], kind):
            problems.append(f"{key} = {data[key]!r} is not {_TYPES[kind]}")
            del data[key]
        elif required and key not in data:
            problems.append(f"{key} is missing ({meaning})")
    problems += _check_values(directory.name, data)

    patches, wrong = patch_files(data, directory)
    problems += wrong
    archs = ARCH_MECHANISMS.get(data.get("archs", ""))
    kernels = KERNEL_SPACES.get(data.get("kernel-space", ""))
    tu_parts = data.get("tu-parts", False)
    if tu_parts and not kernels:
        problems.append("tu-parts = true needs a kernel-space (parts are cut from kernel sources)")
    needed = {
        archs.patch if archs else None: f"archs = {data.get('archs')!r}",
        kernels.patch if kernels else None: f"kernel-space = {data.get('kernel-space')!r}",
        TU_PARTS_PATCH if tu_parts else None: "tu-parts = true",
    }
    needed.pop(None, None)
    problems += _check_patches({api.patch_topic(p) for p in patches}, needed)
    stable, wrong = _stable_line(data.get("stable"), directory, {p.name for p in patches})
    problems += wrong
    table = data.get("unit-table")
    if table and not (VENDORED / table / "units.json").is_file():
        problems.append(f"unit-table = {table!r} names no release with a units.json")
    if problems:
        raise FaShimError(
            f"{path} does not describe a release fa-shim can use: {'; '.join(problems)}.",
            fix="correct it: keys are "
            + "; ".join(f"{k} ({m})" for k, (_, m, _) in _KEYS.items())
            + f"; {GUIDE}.",
        )
    assert archs is not None
    return Release(
        directory.name, data["sdist"], data["sha256"], archs, kernels, tu_parts, patches,
        unit_table=table, stable=stable,
    )  # fmt: skip


def _stable_line(table: dict | None, directory: Path, main: set[str]):
    """The [stable] table as a StableLine (None without one), and what is wrong with it."""
    if table is None:
        return None, []
    problems = [
        f"[stable] has unknown key {k!r}" for k in table if k not in ("torch-target", "patches")
    ]
    target = table.get("torch-target")
    if not is_version(str(target)):
        problems.append(f"[stable] torch-target = {target!r} is not a torch version, e.g. 2.10.0")
    patches, wrong = patch_files(table, directory, strays=False)
    problems += [f"[stable] {w}" for w in wrong]
    problems += [f"[stable] patches repeats {p.name}" for p in patches if p.name in main]
    if not patches:
        problems.append("[stable] patches is empty: the binding needs its patches")
    return (None if problems else StableLine(str(target), patches)), problems


def _check_values(version: str, data: dict) -> list[str]:
    if not is_version(version):
        return [f"its directory name {version!r} is not a PEP 440 version"]
    problems = []
    if "sdist" in data and not is_sdist(data["sdist"], version):
        problems.append(f"sdist = {data['sdist']!r} is not flash_attn-{version}.tar.gz")
    if "sha256" in data and not re.fullmatch(r"[0-9a-f]{64}", data["sha256"]):
        problems.append(f"sha256 = {data['sha256']!r} is not 64 lowercase hex digits")
    for key, table in (("archs", ARCH_MECHANISMS), ("kernel-space", KERNEL_SPACES)):
        if key in data and data[key] not in table:
            hint = key_hint(data[key], table)
            problems.append(f"{key} = {data[key]!r} is none of {', '.join(table)}{hint}")
    return problems


def is_sdist(filename: str, version: str) -> bool:
    """Whether filename names flash-attn <version>'s sdist."""
    try:
        name, found = parse_sdist_filename(filename)
    except InvalidSdistFilename:
        return False
    return name == canonicalize_name("flash-attn") and found == Version(version)


def _check_patches(present: set[str], needed: dict[str, str]) -> list[str]:
    """A feature's patch is listed exactly when the toml declares the feature: a declared one
    without its patch would build without it, an undeclared patch would go unused by fa-shim."""
    features = {m.patch for m in ARCH_MECHANISMS.values()} | {TU_PARTS_PATCH}
    features |= {s.patch for s in KERNEL_SPACES.values()}
    problems = [
        f"{why} needs {name}, which patches does not list"
        for name, why in sorted(needed.items())
        if name not in present
    ]
    problems += [
        f"patches lists {name}, and nothing declares what it provides"
        for name in sorted((present & features) - needed.keys())
    ]
    return problems


def patches(version: str) -> list[Patch]:
    """The vendored patches of a version, in the order they apply (none for an unknown one)."""
    return api.read_patches(release(version).patches)
