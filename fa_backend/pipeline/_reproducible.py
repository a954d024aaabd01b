"""The same fingerprint gives the same wheel, byte for byte (docs/reproducibility.md, "How"):
prefix maps for the paths compilers embed, fixed file times of the laid-out tree, and the split
of the provenance into the wheel's part and this run's (the wheel-cache entry's)."""

from __future__ import annotations

import os
import re
import socket
import sysconfig
import time
from pathlib import Path

from ..flavours._interface import Flavour
from ..resources.launcher import KEEP_ENV, SEED_ENV  # noqa: F401 (_upstream sets them)
from ..toolchain import _compilers
from ..toolchain._torch import TorchInfo

FIXED = "/fa-shim"
# Python's CFLAGS carry -g, but the host compiler's debug info is not the sources' alone: GCC
# takes two identical `#pragma once` headers of one mtime second for one, so the times the
# installer gave torch's headers decided it (docs/reproducibility.md); the code is the same
NO_DEBUG_INFO = "-g0"


def _variants(path: str | os.PathLike | None) -> list[str]:
    """The path as given and symlink-resolved: compilers see either."""
    if not path:
        return []
    text = os.path.abspath(str(path))
    return list(dict.fromkeys([text, os.path.realpath(text)]))


def prefix_maps(
    source_root: Path, torch: TorchInfo | None, cuda_home: Path | None
) -> list[list[str]]:
    """(old, new) pairs, the general ones first: GCC applies the last matching map. Only paths
    the same on every node (sccache hashes the maps as arguments: TMPDIR would cost every hit);
    torch None: for commands that read neither torch's nor Python's files."""
    places = [(cuda_home, "cuda"), (source_root, "src")]
    if torch:
        places = [
            (sysconfig.get_paths().get("include"), "python/include"),
            (torch.site_dir, "site-packages"),
            (torch.package_dir, "site-packages/torch"),
            *places,
        ]
    maps = {}
    for path, name in places:
        for old in _variants(path):
            if "," not in old and " " not in old and old != "/":  # nvcc splits -Xcompiler at ,
                maps[old] = f"{FIXED}/{name}"
    return [[old, maps[old]] for old in sorted(maps, key=len)]


def map_flag(banner: str) -> str:
    """The prefix-map option the host compiler takes, from its `--version` banner (no compile):
    -ffile-prefix-map (GCC 8, clang 10; it maps __FILE__ too), else -fdebug-prefix-map."""
    first = banner.splitlines()[0] if banner else ""
    versions = re.findall(r"(\d+)\.\d+(?:\.\d+)?", first)
    if not versions:
        return "-fdebug-prefix-map"
    clang = "clang" in first.lower()
    major = int(versions[0] if clang else versions[-1])
    return "-ffile-prefix-map" if major >= (10 if clang else 8) else "-fdebug-prefix-map"


def flags(maps: list[list[str]], banner: str) -> dict[str, list[str]]:
    """The options for the cxx and nvcc flag lists of every extension."""
    flag = map_flag(banner)
    cxx = [f"{flag}={old}={new}" for old, new in maps]
    return {"cxx": cxx, "nvcc": [f"-Xcompiler={f}" for f in cxx]}


def compile_flags(plan, tools, source_root: Path) -> dict[str, list[str]]:
    """The prefix-map options of this build, for every extension's cxx and nvcc flags."""
    cuda_home = tools.nvcc.cuda_home if tools.nvcc else None
    banner = _compilers.host_compiler()["version"]
    made = flags(prefix_maps(source_root, plan.torch, cuda_home), banner)
    if plan.flavour.torch_free_kernels(plan):  # maps naming a venv would make each one's differ
        made["nvcc"] = flags(prefix_maps(source_root, None, cuda_home), banner)["nvcc"]
    made["cxx"].append(NO_DEBUG_INFO)
    return made


# ---------------------------------------------------------------------------- the provenance

# What a provenance holds that describes this machine and run rather than the wheel: the same
# fingerprint may come with any of these values, so they stay out of the wheel's bytes.
_HOW = ("cuda_arch_choice", "compiler_cache", "network_seal")
_TORCH_HOW = ("path",)
_NVCC_WHAT = ("version", "build")


def split(prov: dict, flavour: Flavour) -> tuple[dict, dict]:
    """(what goes into the wheel, how it was built: for the wheel-cache entry's record)."""
    what = {k: v for k, v in prov.items() if k not in _HOW}
    how = {k: prov[k] for k in _HOW if k in prov}
    for name, keys in ((flavour.sources_key, flavour.sources_how), ("torch", _TORCH_HOW)):
        if isinstance(prov.get(name), dict):
            what[name], how[name] = _strip(prov[name], keys)
    if isinstance(prov.get("nvcc"), dict):
        nvcc = prov["nvcc"]
        what["nvcc"] = {k: nvcc[k] for k in _NVCC_WHAT if k in nvcc}
        how["nvcc"] = {k: v for k, v in nvcc.items() if k not in _NVCC_WHAT}
    return what, how


def _strip(part: dict, keys: tuple[str, ...]) -> tuple[dict, dict]:
    """Drop `keys` from part and from its nested dicts (e.g. one per source tree)."""
    what, how = {}, {}
    for k, v in part.items():
        if k in keys:
            how[k] = v
        elif isinstance(v, dict):
            what[k], inner = _strip(v, keys)
            if inner:
                how[k] = inner
        else:
            what[k] = v
    return what, how


SOURCE_TIME = 315532800  # 1980-01-01 (the wheel's zip times' floor), unless SOURCE_DATE_EPOCH


def settle_times(root: Path) -> None:
    """One old modification time for the laid-out tree (nvcc records file times in its line
    tables); older than any object, so a retried build keeps what it compiled."""
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or SOURCE_TIME)
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                os.utime(path, (epoch, epoch))


def circumstances() -> dict:
    """Where and when: the entry's record, never the wheel."""
    return {
        "host": socket.gethostname(),
        "uid": os.getuid(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
