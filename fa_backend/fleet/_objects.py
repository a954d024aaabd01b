"""The object cache: each torch-free kernel object kept under the inputs that make it (the source's
bytes, the nvcc command line less this build's directories and `_TORCH_ONLY`, and what reaches
nvcc beyond it: toolchain/_compilers.nvcc_inputs), and the files its compile read, each by sha256
(resources/object_cache's manifest), so that a build for another torch, Python or C++ ABI compiles
only the binding (docs/guides/build-speed.md); the launcher serves each unit from the spec
`write_spec` writes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from ..core import _atomic, _log
from ..core._digest import sha256_of
from ..resources.launcher import SPEC_NAME
from ..resources.upstream_driver import TORCH_ONLY_DEFINES
from ..toolchain._compilers import INCLUDE_PATH_ENV, NVCC_FLAGS_ENV
from . import _entries, _serve
from ._serve import under

FORMAT = 3  # 2: keyed on nvcc_inputs (the environment, nvcc and its host compiler); 3: includes
# the C++ ABI's define, which the launcher keeps in an entry's name unless the object shows it
# needs none, and those only torch's headers read (the driver leaves them out of kernel commands)
ABI_DEFINE = "-D_GLIBCXX_USE_CXX11_ABI="
_TORCH_ONLY = (ABI_DEFINE, *TORCH_ONLY_DEFINES)
# flags whose value names this build's files or its parallelism, not what is compiled
_VALUED = {"-o", "--output-file", "--dependency-output", "-MF", "-ccbin", "--compiler-bindir"}
_VALUED |= {"--threads", "-t"}
_ALONE = {"--generate-dependencies-with-compile", "-MD", "-MMD"}
# fa-shim's own path maps (pipeline/_reproducible): they name this build's directories
_PATH_MAPS = tuple(f"-Xcompiler=-f{m}-prefix-map=" for m in ("file", "debug", "macro"))


def root_of(settings) -> Path:
    """Beside the team's wheels when a wheel cache directory is given, else fa-shim's cache."""
    return (settings.wheel_cache_dir or settings.resolved_cache_dir) / "objects"


class Keys:
    """Each torch-free unit's key; `excluded` collects the include directories that no stored unit
    may have read: those outside the tree and the toolkit, and torch's and Python's (`foreign`)
    wherever they lie (conda's nvcc: the toolkit root is the environment that holds them)."""

    def __init__(self, tree: Path, toolkit: Path, inputs: dict, foreign: Sequence[str] = ()):
        """inputs: what reaches nvcc beyond its command line (toolchain/_compilers.nvcc_inputs)."""
        self.tree, self.toolkit, self.inputs = tree.resolve(), toolkit.resolve(), inputs
        self.foreign = [Path(p).resolve() for p in foreign]
        self.excluded: set[Path] = set(self.foreign)
        env = inputs["env"]
        # nvcc's flag variables around each command, the include search paths after it
        self._before, self._after = (shlex.split(env[n] or "") for n in NVCC_FLAGS_ENV)
        paths = [p for n in INCLUDE_PATH_ENV for p in (env[n] or "").split(os.pathsep) if p]
        self._after += [f"-I{p}" for p in paths]
        self.flags: dict[str, list[str]] = {}  # each key's command line as keyed

    def _relative(self, arg: str) -> str:
        return arg.replace(str(self.tree), ".")

    def key(self, args: Sequence[str], source: str, cwd: Path) -> str:
        """args: the command after the compiler; source: the unit's source path."""
        kept, words = [], iter([*self._before, *args, *self._after])
        for a in words:
            if a in _VALUED:
                next(words, None)
                continue
            given = next(words, "") if a in ("-I", "-isystem") else None
            given = a[2:] if given is None and a.startswith("-I") else given
            if given is not None:
                directory = (cwd / given).resolve()
                if under(directory, [self.tree]):  # its files: the entry's includes
                    kept.append(f"-I{self._relative(str(directory))}")
                elif under(directory, self.foreign) or not under(directory, [self.toolkit]):
                    self.excluded.add(directory)  # nvcc's version stands for the toolkit's
            elif not (a in _ALONE or a.startswith(_TORCH_ONLY + _PATH_MAPS) or a == source):
                kept.append(self._relative(a))
        src = (cwd / source).resolve()
        facts = {
            "format": FORMAT,
            "source": str(src.relative_to(self.tree)) if under(src, [self.tree]) else source,
            "source_sha256": sha256_of(src),
            "args": kept,
            "compilers": self.inputs,
        }
        key = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]
        self.flags[key] = kept
        return key


def make_root(root: Path, team_root: Path | None) -> bool:
    """The root and its locks' directory, open to a team as its wheel cache is (_entries.make).
    False, after one warning naming the path, where nothing can be kept there (read-only, full,
    over quota, a file in the way): the build then reads what it holds and compiles the rest."""
    with contextlib.suppress(OSError):  # the probe below says why
        _entries.make(root / ".locks", team_root or root)  # and root, the directory above it
    for path in (root, root / ".locks"):
        why = _atomic.unwritable(path)
        if why:
            _log.warn(
                f"the object cache cannot keep kernel objects in {path} ({why}): this build "
                "only reads it and compiles what it lacks (make it a writable directory, or "
                "turn the object cache off with -C object-cache=false)"
            )
            return False
    return True


def write_spec(
    scratch: Path,
    root: Path,
    units: dict[str, str],
    excluded: Sequence[Path],
    built_under: str,
    lock_timeout: float,
    heartbeat: float,
    keep: bool = True,
    audit: Path | None = None,
    keys: Keys | None = None,
) -> Path:
    """What the launcher reads: the root, each unit's key (and its flags) by output, the tree
    and the toolkit a manifest names includes below, the include directories a stored unit must
    not have read, what the build runs under, whether the root can keep objects, and for `cache
    check --rebuild` the file where it compares each compile with the entry it would have
    linked (nothing served, nothing kept). Without `keys`, the tree is `scratch`."""
    flags = keys.flags if keys else {}
    spec = {
        "root": str(root),
        "units": {out: {**u, "flags": flags.get(u["key"])} for out, u in units.items()},
        "tree": str(keys.tree if keys else scratch.resolve()),
        "toolkit": str(keys.toolkit) if keys else None,
        "excluded": [str(p) for p in excluded],
        "built_under": built_under,
        "lock_timeout": lock_timeout,
        "heartbeat": heartbeat,
        "keep": keep,
        "audit": str(audit) if audit else None,
    }
    path = scratch / SPEC_NAME  # where the build's launcher looks (pipeline/_upstream)
    path.write_text(json.dumps(spec, indent=1))
    return path


def cached(spec_path: Path) -> dict[str, dict]:
    """The spec's units that are cached now: their records by output path."""
    spec = json.loads(spec_path.read_text())
    now: dict[str, str | None] = {}  # the units' headers, each hashed once
    found = {out: _serve.find(spec, unit, now) for out, unit in spec["units"].items()}
    return {out: hit[1] for out, hit in found.items() if hit}


# what a killed writer leaves (_serve._store): an entry being written, or a
# damaged one moved aside; `cache check` lists them and `--sweep` removes them
LEFTOVERS = (".*.part-*", ".*.bad-*")


def leftovers(root: Path) -> list[Path]:
    return sorted(p for pattern in LEFTOVERS for p in root.glob(pattern))


def entries(root: Path) -> list[Path]:
    """The entry directories (being written and replaced ones start with a dot)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def describe(root: Path) -> str:
    """One line for doctor: where the objects are and how much they hold."""
    found = entries(root)
    size = sum(p.stat().st_size for e in found for p in e.iterdir() if p.is_file())
    return f"{len(found)} kernel object(s), {size / 2**20:.0f} MiB, in {root}"


def check(directory: Path) -> str | None:
    """Why an entry would not be served (None: it would be), for `cache check`."""
    if _serve.lookup(directory.parent, directory.name) is None:
        return "incomplete or not the object it recorded (a build compiles it again)"
    return None
