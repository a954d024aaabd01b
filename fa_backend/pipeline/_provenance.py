"""What went into a wheel, in the two forms fa-shim keeps: the fingerprint (what decides what
the wheel computes, fa-shim's own sources included: the wheel cache's key) and the provenance
(the wheel's <dist-info>/fa_shim_provenance.json, which the runtime guard and `verify` read)."""

from __future__ import annotations

import functools
import hashlib
import os
from typing import TYPE_CHECKING

from ..core._digest import sha256_of
from ..core._version import __version__
from ..flavours._interface import Plan, Tools
from ..resources import GUARD, PACKAGE
from ..resources.runtime_guard import binding
from ..toolchain import _archs, _compilers, _toolkit
from . import _seal, _stats

if TYPE_CHECKING:  # the fingerprint is a hit's, which imports none of the build
    from ._compile_plan import Prepared


@functools.cache
def fa_shim_sources() -> str:
    """sha256 over fa_backend/'s own files (names and contents): `__version__` stays put across
    commits, so a changed backend must change the cache key by itself."""
    return tree_digest(str(PACKAGE))


def tree_digest(root: str) -> str:
    """sha256 over each file's path below root and its contents' sha256, by path parts, bytecode
    left out; walked with strings: a tenth of pathlib's time on every hit (docs/benchmarks.md)."""
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


def _torch_facts(plan: Plan) -> list:
    """What of torch decides the module: its release, CUDA, C++ ABI and standard; for a stable-ABI
    module only its floor and CUDA major (every torch from the floor on runs it)."""
    if plan.stable_abi:
        return ["stable-abi", plan.stable_abi, plan.torch.cuda_major]
    return [plan.torch.version, plan.torch.cuda, plan.torch.abi, plan.torch.cxx_std]


def _nvcc_programs(tools: Tools) -> dict | None:
    """The nvcc that runs and the host compiler it runs (torch's -ccbin is CC), each by resolved
    path and `--version` (its build too), as kernel objects are keyed; the variables are "env"."""
    if not tools.nvcc:
        return None
    facts = _compilers.nvcc_inputs(tools.nvcc.path, os.environ.get("CC"))[0]
    return {"nvcc": facts["nvcc"], "host": facts["host"]}


def fingerprint(plan: Plan, tools: Tools) -> dict:
    """Everything that decides what the wheel computes; jobs, threads and the compile's shape do
    not (they cut the objects, not a kernel), so machines of any size share it."""
    compiler = _compilers.host_compiler()
    return {
        "wheel": plan.wheel_name,
        "metadata": hashlib.sha256(plan.metadata.encode()).hexdigest(),  # Requires-Dist & co.
        "fa_shim": __version__,
        "fa_shim_sources": fa_shim_sources(),
        "sources": plan.flavour.sources(plan, with_origin=False),
        "patches": [p.sha256 for p in plan.patches],
        "guard": sha256_of(GUARD),
        "torch": _torch_facts(plan),
        "nvcc": str(tools.nvcc.version) if tools.nvcc else None,
        "archs": list(tools.archs.targets) if tools.archs else None,
        "kernel_set": plan.kernel_set,
        "host_compiler": [compiler["path"], compiler["version"]],
        "env": {name: os.environ.get(name) for name in _compilers.COMPILER_ENV},
        "nvcc_programs": _nvcc_programs(tools),
        "source_date_epoch": os.environ.get("SOURCE_DATE_EPOCH"),  # the wheel's zip times
    }


def provenance(plan: Plan, prep: Prepared) -> dict:
    return {
        "fa_shim_version": __version__,
        "flash_attn_version": plan.flavour.upstream_version(plan),
        "distribution": plan.names.dist,
        plan.flavour.sources_key: plan.flavour.sources(plan, with_origin=True),
        "wheel_version": plan.version,
        "python_tag": str(plan.tag),
        "torch": {
            "version": plan.torch.version,
            "cuda": plan.torch.cuda,
            "cxx11_abi": plan.torch.abi,
            "cxx_std": plan.torch.cxx_std,
            "path": plan.torch.package_dir,
            "stable_abi": plan.stable_abi,
            "binding": binding(plan.torch.version, plan.stable_abi),
        },
        "nvcc": {
            **prep.tools.nvcc.describe(),
            "origin": prep.tools.nvcc.origin,
            "build": _compilers.nvcc_build(prep.tools.nvcc.path),
            "toolkit": _toolkit.manifest_of(prep.tools.nvcc),
        }
        if prep.tools.nvcc
        else None,
        "cuda_arch_choice": prep.tools.archs.describe() if prep.tools.archs else None,
        "compiler_cache": prep.tools.compiler_cache,
        "network_seal": _seal.choose().kind,
        **prep.tools.shape,  # how the flavour cut its sources into units
        "host_compiler": _compilers.host_compiler(),
        "cuda_archs": _archs.compiled(prep.commands),
        "injected_flags": prep.report.get("extensions", []),
        "patches": [{"name": p.name, "reason": p.reason, "sha256": p.sha256} for p in plan.patches],
        "kernel_set": plan.kernel_set,
        "kernel_set_name": plan.flavour.kernel_set_name(plan),  # what install.py asks for
        "compile_commands": {k: sum(c.kind == k for c in prep.commands) for k in ("cxx", "nvcc")},
        "reused_objects": _stats.served(prep.stats_file),  # from the object cache, not compiled
    }
