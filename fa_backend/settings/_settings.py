"""The settings model: one validated object from -C > FA_SHIM_* env > [tool.fa-shim].

Each field carries its own help text, so the README's settings reference is generated from here
(`python -m fa_backend settings --markdown`) and cannot drift.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

from packaging.version import InvalidVersion, Version

from ..core._errors import FaShimError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.9/3.10 only
    import tomli as tomllib

ConfigSettings = Mapping[str, Union[str, list[str]]]
ENV_PREFIX = "FA_SHIM_"


def _setting(default: Any, kind: str, help: str) -> Any:
    return dataclasses.field(default=default, metadata={"kind": kind, "help": help})


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
    )
    cache_dir: Path | None = _setting(
        None,
        "path",
        "fa-shim's cache (default: $XDG_CACHE_HOME/fa-shim, else ~/.cache/fa-shim): downloaded "
        "sdists (`sdists/`), build logs (`logs/`), torch's probed facts (`torch-probes/`) and, "
        "unless wheel-cache-dir is set, finished wheels (`wheels/`).",
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
    nvcc_threads: int | None = _setting(None, "int", "nvcc --threads per job (NVCC_THREADS).")
    tu_parts: int | None = _setting(
        None,
        "int",
        "Compile each forward kernel source as this many parts in parallel (default: as many "
        "as the idle compile jobs allow, e.g. 4 for a 4-source tailored set on 16 cores; "
        "1 = never split; 2.8.3+ only).",
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
    flavour: str = dataclasses.field(default="fa2", metadata={"kind": "project"})
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
# settings that mean something to one flavour only: given to the other, they are refused
ONLY_FOR = {
    "fa2": ("sdist", "sdist-dir", "allow-unknown-version", "tu-parts"),
    "fa3": ("fa3-source", "fa3-hopper", "fa3-cutlass", "fa3-source-dir"),
}


def env_name(key: str) -> str:
    return ENV_PREFIX + key.replace("-", "_").upper()


def _did_you_mean(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def _unknown(key: str, where: str, known: list[str]) -> FaShimError:
    return FaShimError(
        f"unknown setting {key!r} in {where}.{_did_you_mean(key, known)}",
        fix="use one of: " + ", ".join(known) + " (README, 'Settings').",
    )


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _absolute(text: str) -> Path:
    """A relative path is relative to where the user ran the command: a frontend (pip) runs the
    backend elsewhere, but the shell's PWD survives it."""
    path = Path(os.path.expanduser(text))
    if path.is_absolute():
        return path
    pwd = os.environ.get("PWD")
    base = Path(pwd) if pwd and os.path.isabs(pwd) and os.path.isdir(pwd) else Path.cwd()
    return Path(os.path.normpath(base / path))


def _convert(key: str, kind: str, value: Any, where: str) -> Any:
    def bad(expected: str) -> FaShimError:
        return FaShimError(
            f"setting {key!r} from {where} is {value!r}, expected {expected}.",
            fix=f"correct {where.rsplit(' ', 1)[-1]}."
            if where.startswith("environment variable")
            else f"correct {key} in {where}.",
        )

    if kind == "archs":
        items = value if isinstance(value, (list, tuple)) else re.split(r"[;,\s]+", str(value))
        archs = []
        for item in (str(i).strip() for i in items):
            if not item:
                continue
            # compute_XX names PTX for a virtual arch: flash-attn compiles real GPU code only
            match = re.fullmatch(r"(?:sm_)?(\d+)(?:\.(\d))?([af]?)", item)
            if not match:
                raise bad("architectures like 80, 90, 9.0, 100a or 'sm_90'")
            major, minor, suffix = match.groups()
            archs.append(f"{major}{minor or ''}{suffix}")
        return tuple(dict.fromkeys(archs))
    if kind == "list":
        items = value if isinstance(value, (list, tuple)) else re.split(r"[;,\s]+", str(value))
        return tuple(dict.fromkeys(str(i).strip().lower() for i in items if str(i).strip()))
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise bad("a single value")
        value = value[0]
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise bad("true or false")
    if kind == "int":
        try:
            number = int(str(value))
        except ValueError:
            raise bad("a positive integer") from None
        if number < 1:
            raise bad("a positive integer")
        return number
    if kind == "seconds":
        try:
            seconds = float(str(value))
        except ValueError:
            raise bad("a positive number of seconds") from None
        if not seconds > 0:
            raise bad("a positive number of seconds")
        return seconds
    if kind == "path":
        return _absolute(str(value).strip()) if str(value).strip() else None
    if kind == "str":
        return str(value).strip()
    if kind == "version":
        try:
            Version(str(value).strip())
        except InvalidVersion:
            raise bad("a PEP 440 version such as 2.8.3 or 2.8.3.post2") from None
        # v2.8.3, 2.8.3.0 and ' 2.8.3 ' are 2.8.3; 2.8.3-post2 is 2.8.3.post2. Zeros beyond
        # major.minor.patch go (upstream's releases always have three: 2.7.0.post2 stays)
        version = Version(str(value).strip())
        release = list(version.release)
        while len(release) > 3 and release[-1] == 0:
            release.pop()
        full, short = ".".join(map(str, version.release)), ".".join(map(str, release))
        return str(version).replace(full, short, 1)
    raise AssertionError(kind)


def read_pyproject_table(project_dir: Path) -> dict[str, Any]:
    path = project_dir / "pyproject.toml"
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise FaShimError(
            f"{path} is not valid TOML: {exc}", fix="correct pyproject.toml."
        ) from None
    return data.get("tool", {}).get("fa-shim", {})


# What a project directory builds: a fact of its pyproject.toml ([tool.fa-shim] only, never -C or
# the environment). fa2 is the root project; fa3 is flash-attn-3/ (docs/fa3-design.md).
FLAVOUR_KEY = "flavour"
FLAVOURS = ("fa2", "fa3")


def _check_flavour(flavour: Any) -> str:
    if flavour not in FLAVOURS:
        raise FaShimError(
            f"{FLAVOUR_KEY} = {flavour!r} in [tool.fa-shim] of pyproject.toml is not one of "
            f"{', '.join(FLAVOURS)}.{_did_you_mean(str(flavour), list(FLAVOURS))}",
            fix="correct pyproject.toml (fa2: flash-attn, fa3: flash-attn-3).",
        )
    return flavour


def _check_applies(flavour: str, given: dict[str, str]) -> None:
    """A setting of the other flavour is a mistake, not something to ignore silently."""
    for other, keys in ONLY_FOR.items():
        for key in keys:
            if other != flavour and key in given:
                project = "flash-attn-3/ (flavour fa3)" if other == "fa3" else "fa-shim's root"
                raise FaShimError(
                    f"setting {key!r} (from {given[key]}) applies to {project} only, and this "
                    f"project builds {'flash-attn-3' if flavour == 'fa3' else 'flash-attn'}.",
                    fix=f"drop {key}, or build the other project.",
                )


def load(
    config_settings: ConfigSettings | None,
    environ: Mapping[str, str] | None = None,
    project_dir: Path | None = None,
) -> Settings:
    """Merge the three sources, highest first: config_settings, environment, [tool.fa-shim]."""
    environ = os.environ if environ is None else environ
    known = list(FIELDS)
    layers: list[tuple[str, dict[str, Any]]] = []

    table = dict(read_pyproject_table(project_dir or Path.cwd()))
    flavour = _check_flavour(table.pop(FLAVOUR_KEY, "fa2"))
    for key in table:
        if key not in FIELDS:
            raise _unknown(key, "[tool.fa-shim] of pyproject.toml", [*known, FLAVOUR_KEY])
    layers.append(("[tool.fa-shim]", table))

    env_layer = {}
    known_env = {env_name(k): k for k in known}
    for name, value in environ.items():
        if name.startswith(ENV_PREFIX):
            if name not in known_env:
                raise _unknown(name, "the environment", list(known_env))
            env_layer[known_env[name]] = value
    layers.append(("the environment", env_layer))

    cs_layer = {}
    for key, value in (config_settings or {}).items():
        norm = key.lstrip("-").replace("_", "-")
        if norm not in FIELDS:
            raise _unknown(key, "config_settings (-C)", known)
        cs_layer[norm] = value
    layers.append(("config_settings (-C)", cs_layer))

    _check_applies(
        flavour,
        {
            k: (where if layer is not env_layer else env_name(k))
            for where, layer in layers
            for k in layer
        },
    )
    values: dict[str, Any] = {"flavour": flavour}
    for where, layer in layers:  # later layers win
        for key, value in layer.items():
            field = FIELDS[key]
            # name the real source, so the fix says what to change: FA_SHIM_MAX_JOBS
            source = f"environment variable {env_name(key)}" if layer is env_layer else where
            values[field.name] = _convert(key, field.metadata["kind"], value, source)
    if values.get("sdist_dir") and not values["sdist_dir"].is_dir():
        raise FaShimError(
            f"the sdist-dir {values['sdist_dir']} does not exist (or is not a directory).",
            fix="create it with the flash-attn sdists in it, or correct the sdist-dir setting "
            "(without it the sdist is downloaded from the package index).",
        )
    if values.get("fa3_source_dir") and not values["fa3_source_dir"].is_dir():
        raise FaShimError(
            f"the fa3-source-dir {values['fa3_source_dir']} does not exist (or is not a "
            "directory).",
            fix="create it with the two FlashAttention-3 tarballs in it, or correct the "
            "fa3-source-dir setting.",
        )
    return Settings(**values)


def reference_markdown() -> str:
    """The settings table for the README, generated from the model."""
    rows = ["| `-C` key | environment variable | default | meaning |", "|---|---|---|---|"]
    for key, field in FIELDS.items():
        default = field.default
        shown = "—" if default in (None, ()) else f"`{str(default).lower()}`"
        rows.append(f"| `{key}` | `{env_name(key)}` | {shown} | {field.metadata['help']} |")
    return "\n".join(rows)
