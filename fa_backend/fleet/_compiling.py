"""The caches around the build's compilers, for a wheel the build compiles: the compiler cache's
settings and session, the stable source path it hashes, and the object cache (its keys and
spec: fleet/_objects; its side in the launcher: fleet/_serve), given to pipeline/_build as its
Wrappers. A wheel-cache hit never imports this module or the build (fleet/_cached).

The stable source path: a build tree at the same absolute path on every node, so that a shared
compiler cache hits: nvcc hands cudafe++ and cicc the .cu file's resolved absolute path, which
sccache hashes as it is, and the device code records it. The slot named by the sources,
/tmp/fa-shim-src-<digest>, whatever else builds on the node; while another build of those
sources holds it, the next one waits (a second path would compile other bytes under the same
object keys). A slot is held by a flock on its .lock file (docs/guides/fleet.md)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sysconfig
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..core import _log
from ..core._errors import FaShimError
from ..flavours.api import Plan, Tools
from ..pipeline import api as pipeline
from ..pipeline.api import Wrappers
from ..toolchain import _compilers
from . import _objects, _sccache, _wheel_cache

SERVE = "fa_backend.fleet._serve:serve"  # the object cache's side in the launcher
ROOT = Path("/tmp")  # the slots' directory; not TMPDIR: that differs per node and per job
PREFIX = "fa-shim-src-"
POLL = 1.0  # seconds between tries while another build of the same sources holds the slot


def wrappers(
    plan: Plan,
    tools: Tools,
    where: Path,
    audit: Path | None = None,
    in_slot: bool = False,
    objects_only: bool = False,
) -> Wrappers:
    """What stands around the compilers of a build in `where`: the compiler cache's settings,
    and the object cache's spec (`audit`: every unit compiled and compared there, `objects_only`
    where no wheel is compared; `in_slot`: `where` is the sources' slot, the one path whose
    objects the cache keeps)."""
    env = {}
    if tools.compiler_cache:
        # every build has a fresh scratch path: hash paths relative to it, or nothing ever hits
        env = {"CCACHE_BASEDIR": str(where), "CCACHE_NOHASHDIR": "true"}
        env.update(_sccache.defaults(dict(os.environ)))  # as its server got them

    def units(tools: Tools, source: Path, commands) -> frozenset[str]:
        return object_cache(plan, tools, source, commands, audit, in_slot, objects_only)

    return Wrappers(env, SERVE, units)


def prepare(plan: Plan, tools: Tools, where: Path) -> pipeline.Prepared:
    """`prepare`'s: build.ninja written as a build would write it, the object cache asked."""
    return pipeline.prepare(plan, where, tools, wrappers(plan, tools, where))


def object_cache(
    plan: Plan,
    tools: Tools,
    source: Path,
    commands,
    audit: Path | None = None,
    in_slot: bool = False,
    objects_only: bool = False,
) -> frozenset[str]:
    """Write the object cache's spec (fleet/_objects) where the flavour's CUDA sources are
    torch-free; return the sources it serves without compiling. With `audit` (cache check
    --rebuild) every unit compiles, compared there with the entry a build would link. Objects
    compiled outside the slot are not kept: their device code records another path."""
    s = plan.settings
    if not ((s.object_cache or audit) and tools.nvcc and plan.flavour.torch_free_kernels(plan)):
        return frozenset()
    if audit and not in_slot:
        raise FaShimError(
            f"the rebuild compiles in {source.parent}, not in its sources' slot "
            f"{ROOT}/{PREFIX}<digest>, so no object would compare "
            "(the device code records its source path).",
            fix=f"free or remove what blocks the slot (the warning above names it), or make "
            f"{ROOT} writable, and run it again.",
        )
    units = [c for c in commands if c.kind == "nvcc"]
    cwd = source  # torch's build.ninja names absolute paths; relative ones are the setup dir's
    ccbin = next(filter(None, (_compilers.ccbin_in(c.args) for c in units)), None)
    inputs, unkeyable = _compilers.nvcc_inputs(tools.nvcc.path, ccbin)
    if unkeyable:
        _log.warn(f"object cache not used by this build: {unkeyable}")
        return frozenset()
    # torch's and Python's headers are never the toolkit's, even inside its root (conda)
    foreign = [plan.torch.package_dir, *{sysconfig.get_path(p) for p in ("include", "platinclude")}]
    keys = _objects.Keys(source.parent, tools.nvcc.cuda_home, inputs, foreign)
    by_output, names = {}, {}  # each unit's key and ABI, its source's name, by output path
    for c in units:
        out = str((cwd / c.values("-o")[-1]).resolve())
        key = keys.key(c.args[1:], c.file, cwd)
        by_output[out] = {"key": key, "abi": c.last_define(_objects.ABI_DEFINE)}
        names[out] = c.file.rsplit("/", 1)[-1]
    root = _objects.root_of(s)
    if s.wheel_cache_dir:  # objects/ beside the team's wheels
        _wheel_cache.check_root(s.wheel_cache_dir)
    keep = audit is None and in_slot and _objects.make_root(root, s.wheel_cache_dir)
    spec = _objects.write_spec(
        source.parent,
        root,
        by_output,
        sorted(keys.excluded),
        f"torch {plan.torch.version}",
        s.wheel_cache_lock_timeout,
        s.wheel_cache_heartbeat,
        keep,
        audit,
        keys=keys,
    )
    hits = _objects.cached(spec) if objects_only or not audit else {}
    if audit and objects_only and not hits:  # before hours of compiling that compare nothing
        raise FaShimError(
            f"none of the {len(units)} kernel objects these settings compile is in {root}, and "
            "the wheel cache has no entry for their fingerprint: the rebuild would compare "
            "nothing.",
            fix="run --rebuild with the interpreter and the -C settings the entries were built "
            "with (an entry's fingerprint.json lists what they decide); `cache check` alone "
            "checks every entry.",
        )
    if audit:
        _log.info(f"compiling {len(units)} kernel objects to compare with those in {root}")
        return frozenset()
    served = frozenset(names[o] for o in hits)
    rest = [n for n in pipeline.build_sources(commands) if n not in served]
    if hits:
        under = ", ".join(sorted({r["built_under"] for r in hits.values()}))
        _log.info(
            f"{len(hits)} kernel objects from the object cache (built under {under}), "
            f"compiling {', '.join(rest[:4])}{' ...' if len(rest) > 4 else ''}"
        )
    else:
        kept = f"kept in {root}" if keep else f"none kept ({root} cannot keep them)"
        _log.info(f"object cache: {len(units)} kernel objects to compile, {kept}")
    return served


def fresh_wheel(
    plan: Plan,
    tools: Tools,
    scratch: Path,
    how: dict | None = None,
    audit: Path | None = None,
    check: Callable[[Path], None] | None = None,
    objects_only: bool = False,
) -> Path:
    """The build, with the compiler and object caches around its compilers: a wheel in scratch
    that passed `check` (else verify); `audit`: object_cache's."""
    # a compiler cache shared by nodes: the same source path everywhere, sccache's hit rate;
    # CUDA device code records its source path (_reproducible): the same path for every build
    shared = _sccache.is_sccache(tools.compiler_cache) or tools.nvcc is not None
    sources = plan.flavour.sources(plan, with_origin=False)
    slot = place(scratch, shared, sources, plan.settings.keep_build_dir)
    with slot as where, _sccache.session(tools.compiler_cache):
        wrap = wrappers(plan, tools, where, audit, where != scratch, objects_only)
        return pipeline.fresh_wheel(plan, tools, where, scratch / "wheel", wrap, how, check)


def _lock(path: Path) -> int | None:
    """An open file descriptor for the slot's lock, locked once the build holding it (if any)
    lets go; None when it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # other users take it after us
    except PermissionError:
        try:  # another user's lock file: flock needs no write access
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
    except OSError:
        return None
    waited = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if not waited:
                _log.info(
                    f"waiting for {path}: another build of these sources compiles there (the "
                    "device code records its path, so every build of them compiles from one)"
                )
                waited = True
            time.sleep(POLL)
        except OSError:
            os.close(fd)
            return None


@contextlib.contextmanager
def place(scratch: Path, enabled: bool, sources: dict, keep: bool = False) -> Iterator[Path]:
    """Where to prepare and compile: `scratch` itself, or with `enabled` the slot `sources`
    (the flavour's identity of what it lays out) names, once no other build holds it; `scratch`
    with a warning where the slot cannot be made. With `keep` (setting keep-build-dir) the
    slot's tree is moved into scratch at the end."""
    if not enabled:
        yield scratch
        return
    identity = json.dumps(sources, sort_keys=True, default=str).encode()
    slot = ROOT / f"{PREFIX}{hashlib.sha256(identity).hexdigest()[:16]}"
    fd = _lock(slot.with_name(f"{slot.name}.lock"))
    if fd is not None:
        try:
            shutil.rmtree(slot, ignore_errors=True)  # what a killed build left (its lock is free)
            slot.mkdir(mode=0o700)
        except OSError as e:  # another user's leftovers, or a file there: not ours to remove
            os.close(fd)
            fd, why = None, f"{slot} cannot be made ({e.strerror})"
    else:
        why = f"{slot}.lock cannot be opened or locked"
    if fd is None:
        _log.warn(
            f"{why}: compiling in the scratch directory, so other nodes' compiles will not hit "
            "and no kernel object is kept (its device code records that path)"
        )
        yield scratch
        return
    _log.info(
        f"compiling from {slot} (the same path for every build: reproducible device code, "
        "compiler-cache hits across nodes)"
    )
    try:
        yield slot
    finally:
        if keep:
            shutil.move(str(slot / "src"), str(scratch / "src"))
        shutil.rmtree(slot, ignore_errors=True)
        os.close(fd)  # releases the lock
