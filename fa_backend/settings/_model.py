"""The settings model: each setting, its kind and its help text (the reference is generated from
it). The ones every flavour takes are the Settings dataclass's fields; a flavour declares its
own (Flavour.own_settings), which Settings holds by key in `own`. _settings.load fills it."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

ConfigSettings = Mapping[str, Union[str, list[str]]]
ENV_PREFIX = "FA_SHIM_"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: its key (-C key, FA_SHIM_KEY, [tool.fa-shim] key), default, kind (how
    _settings.convert reads it), help text, an int's maximum, and a must-exist directory's fix."""

    key: str
    default: Any
    kind: str
    help: str
    maximum: int | None = None
    missing: str | None = None


def _setting(default: Any, kind: str, help: str, maximum: int | None = None) -> Any:
    """A shared setting's field (Setting's facts but its key, the field's name)."""
    return dataclasses.field(default=default, metadata=dict(kind=kind, help=help, maximum=maximum))


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fa-shim"


@dataclasses.dataclass(frozen=True)
class Settings:
    cache_dir: Path | None = _setting(
        None,
        "path",
        "fa-shim's cache (default: $XDG_CACHE_HOME/fa-shim, else ~/.cache/fa-shim): downloaded "
        "sdists (`sdists/`), build logs (`logs/`), torch's probed facts (`torch-probes/`), the "
        "wheels verify passed (`verified/`) and, unless wheel-cache-dir is set, finished wheels "
        "(`wheels/`).",
    )
    offline: bool = _setting(False, "bool", "Never download; fail if no local sdist is found.")
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
    torch_python: Path | None = _setting(
        None,
        "path",
        "Interpreter whose torch to build against, when the frontend's build "
        "environment cannot see it (same Python version required).",
    )
    wheel_cache: bool = _setting(
        True, "bool", "Reuse a finished wheel whose full fingerprint matches (see wheel-cache-dir)."
    )
    object_cache: bool = _setting(
        True,
        "bool",
        "Keep each torch-free kernel object by the inputs that make it, and link it into the "
        "next build with the same toolkit, whatever its torch, Python or C++ ABI (kept in "
        "<wheel-cache-dir>/objects, else <cache-dir>/objects).",
    )
    wheel_cache_dir: Path | None = _setting(
        None,
        "path",
        "Where finished wheels are kept, e.g. shared storage (default: <cache-dir>/wheels): "
        "a new or empty directory, or one fa-shim filled (one holding other files is refused); "
        "`python <dir>/install.py` installs the wheel that fits an environment.",
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
    wheel_variants: bool = _setting(
        False,
        "bool",
        "Also keep, beside each wheel in a wheel cache's torch and stable directories, a PEP 825 "
        "variant of it named for its GPU code (`...-linux_x86_64-sm90.whl`) and the "
        "`{name}-{version}-variants.json` from which `uv pip install --preview-features "
        "wheel-variants` takes the variant for the node's GPU; pip and uv without the flag "
        "take the plain wheel.",
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
    # the flavours' own settings by key: each one given, else its default
    own: Mapping[str, Any] = dataclasses.field(default_factory=dict, metadata={"kind": "project"})
    progress: str = _setting(
        "auto",
        "str",
        "Where build progress goes besides stderr and the log: `auto` (also the terminal, "
        "updated in place, when the frontend hides the build's output, e.g. pip without -v), "
        "`tty`, `stderr` (only), `none` (only the log). Never stdout.",
    )

    def __getattr__(self, name: str) -> Any:
        """A flavour's own setting as an attribute: `settings.a_key` is `own["a-key"]`."""
        own = self.__dict__.get("own", {})
        if name.replace("_", "-") in own:
            return own[name.replace("_", "-")]
        raise AttributeError(name)

    @property
    def resolved_cache_dir(self) -> Path:
        return self.cache_dir or default_cache_dir()

    @property
    def resolved_wheel_cache_dir(self) -> Path:
        return self.wheel_cache_dir or self.resolved_cache_dir / "wheels"


# `flavour` is a fact of the project (its pyproject.toml), never a -C or FA_SHIM_* setting
FIELDS = {
    f.name.replace("_", "-"): Setting(f.name.replace("_", "-"), f.default, **f.metadata)
    for f in dataclasses.fields(Settings)
    if f.metadata["kind"] != "project"
}


def env_name(key: str) -> str:
    return ENV_PREFIX + key.replace("-", "_").upper()
