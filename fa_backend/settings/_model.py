"""The settings model: every setting, its kind and its help text, in one dataclass.

Each field carries its own help text, so the settings reference is generated from here
(`python -m fa_backend settings`) and cannot drift. _settings.load fills it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

ConfigSettings = Mapping[str, Union[str, list[str]]]
ENV_PREFIX = "FA_SHIM_"


def _setting(default: Any, kind: str, help: str, maximum: int | None = None, **more: str) -> Any:
    """A setting's field: its kind (how _convert reads it), help text, for an int the largest
    value it takes (`maximum`) and, for a directory that must exist, `missing`: the fix when it
    does not."""
    metadata = {"kind": kind, "help": help, "max": maximum, **more}
    return dataclasses.field(default=default, metadata=metadata)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fa-shim"


@dataclasses.dataclass(frozen=True)
class Settings:
    flash_attn_version: str | None = _setting(
        None, "version", "Upstream flash-attn release to build (pinned in [tool.fa-shim])."
    )
    sdist: Path | None = _setting(
        None, "path", "Explicit path of the upstream sdist (.tar.gz); used before anything else."
    )
    sdist_dir: Path | None = _setting(
        None,
        "path",
        "Directory holding upstream sdists (shared storage, e.g. /efs/shared/flash-attn); it must "
        "exist. Relative paths in any path setting are relative to where the command was run.",
        missing="create it with the flash-attn sdists in it, or correct the sdist-dir setting "
        "(without it the sdist is downloaded from the package index).",
    )
    cache_dir: Path | None = _setting(
        None,
        "path",
        "fa-shim's cache (default: $XDG_CACHE_HOME/fa-shim, else ~/.cache/fa-shim): downloaded "
        "sdists (`sdists/`), build logs (`logs/`), torch's probed facts (`torch-probes/`), the "
        "wheels verify passed (`verified/`), the memos that answer a cache hit unplanned "
        "(`hits/`) and, unless wheel-cache-dir is set, finished wheels (`wheels/`).",
    )
    offline: bool = _setting(False, "bool", "Never download; fail if no local sdist is found.")
    allow_unknown_version: bool = _setting(
        False, "bool", "Build a flash-attn version that has no pinned sha256 in vendored_patches/."
    )
    cuda_archs: tuple[str, ...] = _setting(
        (),
        "archs",
        "CUDA architectures to compile, e.g. `90` or `80;90` (default: the visible GPUs', else "
        "TORCH_CUDA_ARCH_LIST, else torch's own list, else upstream's; below 8.0 dropped). Each "
        "given one must be a compute capability the chosen nvcc lists (`nvcc --list-gpu-arch`), "
        "as `89`, `8.9`, `sm_89` or with a suffix (`90a`); anything else is refused.",
    )
    nvcc: Path | None = _setting(
        None, "path", "The nvcc to use (default: the first one whose CUDA major matches torch)."
    )
    cuda_toolkit: str = _setting(
        "auto",
        "str",
        "`auto` (a system nvcc whose CUDA major matches torch's, else one from the package "
        "index), `system` (never download one) or `index` (always use NVIDIA's compiler wheels "
        "for torch's CUDA, kept under <cache-dir>/toolkits; CUDA 13+ torches).",
    )
    max_jobs: int | None = _setting(None, "int", "Parallel compile jobs (ninja -j, MAX_JOBS).")
    nvcc_threads: int | None = _setting(
        None,
        "int",
        "nvcc --threads per job (NVCC_THREADS), 1 to 32: more threads than a source's "
        "architectures do nothing.",
        maximum=32,
    )
    tu_parts: int | None = _setting(
        None,
        "int",
        "Compile each forward and backward kernel source as this many parts in parallel "
        "(default: the count the build-time model finds fastest for the set and the compile "
        "jobs, e.g. 4 for a 4-source tailored set on 16 cores; 1 = never split; 2.8.3+ only).",
    )
    head_dims: tuple[str, ...] = _setting(
        (), "list", "Tailored build: only these head dims, e.g. `64;128` (default: all)."
    )
    dtypes: tuple[str, ...] = _setting(
        (), "list", "Tailored build: only these dtypes, `fp16` and/or `bf16` (default: both)."
    )
    forward_only: bool = _setting(
        False, "bool", "Tailored build: no backward kernels (split-KV forward kernels are kept)."
    )
    disable: tuple[str, ...] = _setting(
        (),
        "list",
        "Upstream feature switches to compile out: dropout, alibi, softcap, local, "
        "uneven_k (FLASHATTENTION_DISABLE_*); for flash-attn-3: fp8, split, paged-kv, "
        "appendkv, local, softcap, packgqa, varlen, cluster (as its setup.py names them).",
    )
    fa3_source: Path | None = _setting(
        None,
        "path",
        "flash-attn-3: a flash-attention clone of the release with its csrc/cutlass submodule "
        "(`git clone --recursive --branch v2.8.3`).",
    )
    fa3_hopper: Path | None = _setting(
        None,
        "path",
        "flash-attn-3: flash-attention's LICENSE + hopper/ tree, as a directory or .tar.gz; "
        "used before fa3-source.",
    )
    fa3_cutlass: Path | None = _setting(
        None,
        "path",
        "flash-attn-3: CUTLASS's LICENSE.txt + include/ at the submodule commit, as a "
        "directory or .tar.gz; used before fa3-source.",
    )
    fa3_source_dir: Path | None = _setting(
        None,
        "path",
        "flash-attn-3: a (shared) directory holding both trees as "
        "flash-attention-<tag>-hopper.tar.gz and cutlass-<commit>-include.tar.gz; it must "
        "exist. Then fa-shim's cache, then a download from GitHub unless offline.",
        missing="create it with the two FlashAttention-3 tarballs in it, or correct the "
        "fa3-source-dir setting.",
    )
    fa3_group: int | None = _setting(
        None,
        "int",
        "FlashAttention-3: compile the forward variants of one head dim and dtype (split, "
        "paged, softcap, packgqa) at most this many to a unit, which share most of their "
        "compile (default: the count the build-time model finds fastest for the set, the jobs "
        "and the memory, e.g. 1 for a training set; 1 = upstream's units).",
    )
    fa3_release: str = _setting(
        "auto",
        "str",
        "flash-attn-3: the upstream state to build (vendored_patches/fa3/): `auto` (the newest "
        "line built against torch's stable ABI that the installed torch meets, `main-0251105a` "
        "for torch >= 2.9, else the tagged `2.8.3`), a line's name, its tag (`v2.8.3`) or a "
        "commit prefix of at least 7 hex digits.",
    )
    torch_python: Path | None = _setting(
        None,
        "path",
        "Interpreter whose torch to build against, when the frontend's build "
        "environment cannot see it (same Python version required).",
    )
    wheel_cache: bool = _setting(
        True, "bool", "Reuse a finished wheel whose full fingerprint matches (see wheel-cache-dir)."
    )
    wheel_cache_dir: Path | None = _setting(
        None,
        "path",
        "Where finished wheels are kept, e.g. shared storage (default: "
        "<cache-dir>/wheels); also usable as `pip install --find-links`.",
    )
    wheel_cache_lock_timeout: float = _setting(
        14400.0,
        "seconds",
        "Longest wait, in seconds, for another builder of the same wheel (any host); then the "
        "build fails naming its host, pid and start.",
    )
    wheel_cache_heartbeat: float = _setting(
        15.0,
        "seconds",
        "How often, in seconds, a builder refreshes its wheel-cache lock; one not refreshed "
        "for 8 heartbeats belonged to a dead builder and is taken over.",
    )
    compiler_cache: str = _setting(
        "auto",
        "str",
        "`auto` (ccache or sccache when on PATH), `ccache`, `sccache`, `none`, "
        "or the path of a compiler-cache program.",
    )
    keep_build_dir: bool = _setting(
        False, "bool", "Keep the scratch build directory after a successful build."
    )
    verbose: bool = _setting(False, "bool", "Echo the full upstream build output to stderr.")
    # the project's (a project that names none is fa-shim's root, FlashAttention-2)
    flavour: str = dataclasses.field(default="fa2", metadata={"kind": "project"})
    # where each setting given came from, e.g. "config_settings (-C)" (for messages)
    given: Mapping[str, str] = dataclasses.field(
        default_factory=dict, compare=False, metadata={"kind": "project"}
    )
    progress: str = _setting(
        "auto",
        "str",
        "Where build progress goes besides stderr and the log: `auto` (also the terminal, "
        "updated in place, when the frontend hides the build's output, e.g. pip without -v), "
        "`tty`, `stderr` (only), `none` (only the log). Never stdout.",
    )

    @property
    def resolved_cache_dir(self) -> Path:
        return self.cache_dir or default_cache_dir()

    @property
    def resolved_wheel_cache_dir(self) -> Path:
        return self.wheel_cache_dir or self.resolved_cache_dir / "wheels"


# `flavour` is a fact of the project (its pyproject.toml), never a -C or FA_SHIM_* setting
FIELDS = {
    f.name.replace("_", "-"): f
    for f in dataclasses.fields(Settings)
    if f.metadata["kind"] != "project"
}


def env_name(key: str) -> str:
    return ENV_PREFIX + key.replace("-", "_").upper()


def reference_markdown() -> str:
    """The settings table of docs/reference/settings.md, generated from the model."""
    rows = ["| `-C` key | environment variable | default | meaning |", "|---|---|---|---|"]
    for key, field in FIELDS.items():
        default = field.default
        shown = "—" if default in (None, ()) else f"`{str(default).lower()}`"
        rows.append(f"| `{key}` | `{env_name(key)}` | {shown} | {field.metadata['help']} |")
    return "\n".join(rows)
