"""A wheel-cache hit answered before the plan is made again.

pip runs prepare_metadata_for_build_wheel and build_wheel each in a fresh interpreter. On a hit
both used to make the whole plan again (the flavour registry, a torch probe in a child, nvcc and
the host compiler asked for their versions) only to reach the same fingerprint: most of a hit's
own time (docs/benchmarks.md). So a build that ends in a wheel-cache entry leaves a memo in the
user's cache directory (`<cache-dir>/hits/<key>.json`):
  - under a key of what its plan read that a hook can see at no cost: the settings as resolved,
    the whole environment but for names a frontend changes on every run, the interpreter and
    its import path, the working directory and its pyproject.toml, fa-shim's own sources and
    vendored patches;
  - with the identity (inode, size, mtime) of each program and file the plan read beyond that,
    found again as the plan would look for them: the interpreter, the torch it imports
    (`__init__.py`, `version.py`), the host compiler the environment names, every place an nvcc
    is looked for (so a toolkit installed since is seen) and the nvcc used, and the visible
    GPUs' /proc entries (a plan whose architectures came from GPUs /proc does not list leaves no
    memo);
  - and what the plan concluded: the metadata and the wheel-cache entry.
A hook whose key and identities all match answers from the memo: the same metadata, the same
entry checked as a hit always is (its recorded sha256, verify's record for these bytes and this
torch's libraries), then published. Any difference means the full path: never another wheel, at
worst a slower hit. An isolated build (a fresh import path every run) never matches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path

from ..core import _atomic, _log
from ..core._errors import FaShimError
from ..resources import PYPROJECT, VENDORED
from ..settings import _settings
from ..wheel._wheelfile import publish, read_prepared_metadata, write_dist_info
from ._self import fa_shim_sources, tree_digest

# Set by pip for one run only (its build tracker's temporary directory) or by the shell around
# it: a name here can differ between two runs that build the same wheel.
_VOLATILE_ENV = {"PIP_BUILD_TRACKER", "PIP_REQ_TRACKER", "OLDPWD", "_", "SHLVL"}
_GPUS = Path("/proc/driver/nvidia/gpus")  # one directory per GPU, an `information` file each
_FORMAT = 1
# what record writes beside the format: a memo without all of them is not read
_FIELDS = frozenset(
    [
        "watched",
        "used",
        "gpus",
        "dist_info",
        "metadata",
        "wheel",
        "entry",
        "wheel_cache",
        "cache_dir",
        "torch",
    ]
)


def metadata(config_settings, metadata_directory: str) -> str | None:
    """The dist-info an earlier build's plan wrote for these inputs, written again; None: plan."""
    memo = _lookup(config_settings)
    if memo is None:
        return None
    return write_dist_info(Path(metadata_directory), memo["dist_info"], memo["metadata"])


def wheel(config_settings, wheel_directory: str, metadata_directory: str | None) -> str | None:
    """The wheel-cache entry an earlier build's plan reached for these inputs, checked as any
    hit is, published into wheel_directory; None: make the plan (the full path decides)."""
    from ..fleet import _entries
    from . import _verified

    memo = _lookup(config_settings)
    if memo is None or not _prepared_matches(memo, metadata_directory):
        return None
    entry = _entries.load(Path(memo["wheel_cache"]) / memo["entry"], memo["wheel"])
    if entry is None or _entries.matches(entry):  # its bytes are entry.sha256 from here on
        return None  # gone or damaged: the full path says so and builds again
    torch = _torch_info(memo["torch"])
    if not _verified.passed(Path(memo["cache_dir"]), entry.wheel, torch, entry.sha256):
        return None  # not checked against this torch's libraries: the full path checks
    path = publish(entry.wheel, Path(wheel_directory).absolute())
    _log.info(
        f"wheel cache hit: {entry.wheel} (fingerprint {memo['entry']}; the plan's inputs are "
        f"those of an earlier build, {memo['path']})"
    )
    _log.info(f"built {path}")
    return path.name


def record(plan, tools, entry_key: str) -> None:
    """Leave the memo of this build's plan, when everything it read can be told again cheaply
    (else none: the next hit makes the plan, as before). Never fails the build."""
    torch, settings = plan.torch, plan.settings
    init = str(Path(torch.package_dir, "__init__.py"))
    if torch.python != sys.executable or _torch_here() != init:
        return  # another interpreter's torch, or one found past an isolation overlay
    gpus = _gpus()
    if tools.archs and tools.archs.from_gpus and gpus is None:
        return  # architectures from GPUs this machine does not list in /proc
    used = [str(tools.nvcc.path)] if tools.nvcc else []  # a provisioned one is no candidate
    memo = {
        "format": _FORMAT,
        "watched": _watched(settings),
        "used": {path: _identity(path) for path in used},
        "gpus": gpus,
        "dist_info": plan.dist_info,
        "metadata": plan.metadata,
        "wheel": plan.wheel_name,
        "entry": entry_key,
        "wheel_cache": str(settings.resolved_wheel_cache_dir),
        "cache_dir": str(settings.resolved_cache_dir),
        "torch": dataclasses.asdict(torch),
    }
    path = _path(settings)
    if None in memo["used"].values():
        return
    with contextlib.suppress(OSError):  # an unwritable cache only costs the next hit its plan
        _atomic.write(path, json.dumps(memo, indent=1).encode())


# ------------------------------------------------------------------------------------ the key


def _path(settings) -> Path:
    facts = {
        "format": _FORMAT,
        "settings": repr(settings),
        "env": {k: v for k, v in sorted(os.environ.items()) if k not in _VOLATILE_ENV},
        "python": [sys.executable, sys.path],
        "cwd": os.getcwd(),
        "fa_shim": fa_shim_sources(),
        "vendored": tree_digest(str(VENDORED)) if VENDORED.is_dir() else None,
        # fa-shim's own, and the project's being built (flash-attn-3/ has one of its own)
        "pyproject": [_read(PYPROJECT), _read(_settings.pyproject_of(None))],
    }
    key = hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()
    return settings.resolved_cache_dir / "hits" / f"{key[:32]}.json"


def _lookup(config_settings) -> dict | None:
    """The memo of these inputs when every identity it recorded still holds, else None."""
    try:
        from ..flavours import _registry  # its settings: every flavour's own among them

        settings = _registry.load_settings(config_settings)
        path = _path(settings)
        memo = json.loads(path.read_text(encoding="utf-8"))
    except (FaShimError, OSError, ValueError):
        return None  # bad settings, no memo: the full path says what it must
    if not isinstance(memo, dict) or memo.get("format") != _FORMAT or not memo.keys() >= _FIELDS:
        return None  # another fa-shim's memo, or one edited by hand
    used = memo["used"]
    if any(_identity(p) != seen for p, seen in used.items()) or memo["gpus"] != _gpus():
        return None
    if memo.get("watched") != _watched(settings):
        return None
    return {**memo, "path": str(path)}


def _prepared_matches(memo: dict, metadata_directory: str | None) -> bool:
    """pip resolved against prepared metadata: it must be the memo's (else the full path says)."""
    if not metadata_directory:
        return True
    prepared = read_prepared_metadata(Path(metadata_directory), memo["dist_info"])
    return prepared == memo["metadata"]


# ------------------------------------------------------------------------------ what is read


def _watched(settings) -> dict[str, list | None]:
    """Each program and file the plan finds by looking, found again the same way, with its
    identity (None: not there): the same answer means the plan would find the same things."""
    from ..toolchain import _compilers

    torch = _torch_here()
    files = [sys.executable, _compilers.host_compiler_program()[1]]
    if torch:
        files += [torch, os.path.join(os.path.dirname(torch), "version.py")]
    files += [path for path, _ in _compilers.nvcc_candidates(settings.nvcc)]
    return {path: _identity(path) for path in files}


def _identity(path: str) -> list | None:
    try:
        st = os.stat(path)  # through symlinks: an alternatives switch changes the target
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _torch_here() -> str | None:
    """Where this interpreter imports torch from, found without importing it."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    return spec.origin if spec else None


def _gpus() -> str | None:
    """The visible GPUs by model and bus, as the driver lists them; None where it lists none."""
    try:
        boards = sorted(os.listdir(_GPUS))
        text = "".join(b + (_GPUS / b / "information").read_text() for b in boards)
    except OSError:
        return None
    return hashlib.sha256(text.encode()).hexdigest() if boards else None


def _torch_info(facts: dict):
    from ..toolchain._torch import TorchInfo

    return TorchInfo(**facts)
