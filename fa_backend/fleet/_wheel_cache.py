"""Finished wheels, kept by the full fingerprint of what went into them ("build once, use
everywhere"): <root>/<key>/ the entry (_entries), <root>/install.py a teammate's install
(resources/team_install.py), <root>/torch-<v>/[<set>/][<archs>/] hard links per
torch.__version__ (and tailored kernel set, and arch set: `sm80_sm90`) for --find-links, or for
a module on torch's stable ABI, which serves every torch from its floor of one CUDA major,
<root>/stable-cu<N>-torch<floor>plus/..., <root>/index/<view>/ a PEP 503 index of each view, and
<root>/.locks/<key>.lock one builder per key on any host (docs/guides/fleet.md)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

from packaging.utils import canonicalize_name, parse_wheel_filename

from ..core import _atomic, _failures, _hostlock, _log, _ownership
from ..core._digest import sha256_of
from ..core._errors import FaShimError
from ..flavours import _registry
from ..resources import CHECKOUT, INSTALLER
from ..resources.runtime_guard import PROVENANCE
from ..wheel._metadata import stable_abi_label
from ..wheel._wheelfile import publish
from . import _entries, _variants


def key(fingerprint: dict) -> str:
    blob = json.dumps(fingerprint, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


@contextlib.contextmanager
def locked(root: Path, entry_key: str, timeout: float, heartbeat: float) -> Iterator[None]:
    """Hold the key's lock; a concurrent builder of the same key, on this host or another one
    sharing the directory, waits here, then finds a hit (see _hostlock for why not flock)."""
    path = root / ".locks" / f"{entry_key}.lock"

    def waiting(holder: dict) -> None:
        _log.info(
            f"another build of the same wheel holds {path} ({_hostlock.describe(holder)}); "
            f"waiting for it (at most {timeout:.0f} s, -C wheel-cache-lock-timeout)"
        )

    _entries.make(path.parent, root)  # others take their locks here too
    fix = "wait for that build (its heartbeat is alive), stop it, or raise "
    fix += "-C wheel-cache-lock-timeout."
    what, held_by = "wheel-cache", "another build of the same wheel"
    with _hostlock.HostLock(
        path, timeout, heartbeat, waiting, what=what, held_by=held_by, fix=fix
    ).held():
        yield


def lookup(root: Path, entry_key: str, wheel_name: str) -> Path | None:
    """The entry's wheel when the entry is complete (see _entries), else None."""
    entry = _entries.load(root / entry_key, wheel_name)
    return entry.wheel if entry else None


def view_of(recorded: dict, torch_version: str) -> tuple[str, str]:
    """The view a wheel (its provenance) built against this torch.__version__ belongs in (the
    module docstring), and whom it serves: torch-2.11.0+cu130, or stable-cu13-torch2.10plus for
    a stable-ABI module, which serves torch >= 2.10 of CUDA 13."""
    torch = recorded.get("torch") or {}
    floor = torch.get("stable_abi")
    if not floor:
        return f"torch-{torch_version}", f"torch {torch_version}"
    label = stable_abi_label(torch.get("cuda"), floor)  # cu13.torch2.10plus
    cuda = str(torch.get("cuda") or "").split(".")[0]
    return "stable-" + label.replace(".", "-", 1), f"torch >= {floor} of CUDA {cuda}"


INSTALL_PY = "install.py"
_FA_SHIM_LINE = "FA_SHIM = "  # install.py's line naming the checkout (keep_installer sets it)
# what fa-shim makes in a root (the module docstring; objects/: fleet/_objects, .fa-shim-*.part:
# a writer's temporary name); install.py is fa-shim's when it has its line, a wheel (0.5.0's
# flat copy of each file name's latest build) when it has fa-shim's provenance
_OURS = re.compile(r"[0-9a-f]{32}|(torch|stable)-.+|index|objects|\.locks|\.fa-shim-.+\.part")


def _made_here(path: Path) -> bool:
    if path.is_symlink():
        return False
    if path.name == INSTALL_PY:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            return f"\n{_FA_SHIM_LINE}" in path.read_text(encoding="utf-8")
    if path.suffix == ".whl":
        return bool(_recorded(path))
    return bool(_OURS.fullmatch(path.name))


def check_root(root: Path) -> None:
    """Refuse a root holding files fa-shim does not make there (a project named by mistake,
    `FA_SHIM_WHEEL_CACHE_DIR=.`: its own install.py would be replaced), before anything in it
    changes; like --build-dir's rule (core/_ownership)."""
    _ownership.refuse_foreign(root, "setting wheel-cache-dir", _made_here)


def install_line(root: Path, dist: str) -> str:
    """The line a teammate runs, in their activated environment, to install the wheel that fits
    it from root (docs/guides/fleet.md)."""
    return f"python {root / INSTALL_PY}" + ("" if dist == "flash-attn" else f" {dist}")


def keep_installer(root: Path) -> None:
    """root/install.py as this fa-shim writes it (naming each distribution's project in its
    checkout for the build line of a miss); rewritten only when it differs, so readers never
    meet a file being replaced."""
    text = INSTALLER.read_text(encoding="utf-8")
    with contextlib.suppress(OSError):  # this installer, naming this checkout's projects: kept
        kept = (root / INSTALL_PY).read_text(encoding="utf-8")  # (a hit imports no flavour)
        line = next((r for r in kept.splitlines() if r.startswith("PROJECTS: dict = {")), "")
        if repr(str(CHECKOUT)) in line and kept.replace(line, "PROJECTS: dict = {}", 1) == text:
            return
    projects = {
        canonicalize_name(f.names.dist).replace("-", "_"): str(f.project_dir())
        for f in _registry.every()
    }
    text = text.replace("PROJECTS: dict = {}", f"PROJECTS: dict = {projects!r}", 1)
    _entries.keep(root / INSTALL_PY, text.encode())


def _recorded(wheel: Path) -> dict:
    """The wheel's provenance ({} when it has none or cannot be read)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            name = next(n for n in zf.namelist() if n.endswith(f".dist-info/{PROVENANCE}"))
            return json.loads(zf.read(name))
    except (OSError, StopIteration, ValueError, zipfile.BadZipFile):
        return {}


def link_into(root: Path, wheel: Path, view: str, recorded: dict) -> list[str]:
    """The wheel (its provenance `recorded`) linked into its views, which it returns: the
    torch's directory `view` or its tailored kernel set's below it, and below that its arch
    set's (`sm80_sm90`; none without GPU code): a wheel's name does not say its archs, so only
    there is every build kept apart. A hard link renamed into place (a copy where the file
    system links nothing). In the torch's (or set's) directory a file of that name built for
    other GPUs stays (one warning says where this one is) unless this build's archs cover its;
    anything else there (a file that is no fa-shim wheel, a link to one of the user's, a copy
    cut short) is replaced, for a CPU torch as for a CUDA one."""
    kernel_set = recorded.get("kernel_set_name") or "full"
    top = view if kernel_set == "full" else f"{view}/{kernel_set}"
    archs = _variants.label(recorded.get("cuda_archs"))
    names = linked = [top, *([f"{top}/{archs}"] if archs else [])]
    target = root / top / wheel.name
    if target.is_file() and not os.path.samefile(target, wheel):
        theirs, ours = _recorded(target).get("cuda_archs"), recorded.get("cuda_archs")
        # no readable provenance: not a build of ours (None, never []); a superset replaces it
        if theirs is not None and theirs != ours and not set(theirs) < set(ours or ()):
            linked = names[1:]  # its arch set's directory, if it has one
            where = f"{root / names[-1]} (index: {index_dir(root, names[-1])})"
            _log.warn(
                f"{target} is the build for sm_{',sm_'.join(theirs)}, and stays: this one "
                f"(sm_{',sm_'.join(ours or [])}) is in {where if linked else wheel.parent}, "
                f"and `python {root / INSTALL_PY}` takes it on those GPUs"
            )
    for directory in (_entries.make(root / name, root) for name in linked):
        part = root / f".fa-shim-{uuid.uuid4().hex[:12]}.part"  # the top level's: swept if stale
        try:
            os.link(wheel, part)
        except OSError:
            publish(wheel, directory)
            continue
        try:
            os.replace(part, directory / wheel.name)
        except OSError as exc:
            _failures.name_it(exc, directory / wheel.name)
            raise
        finally:  # rename(2) onto a link of the same inode does nothing and leaves `part`
            part.unlink(missing_ok=True)
    return names


def _hit(root: Path, entry_key: str, wheel_name: str, check: Callable[[Path], None]):
    """The entry's wheel when it is whole, the bytes it recorded, and passes `check` (RECORD
    and verify); a warning and None for one that fails; False where there is no entry. Only a
    served wheel is called a hit."""
    entry = _entries.load(root / entry_key, wheel_name)
    if entry is None:
        return False
    try:
        why = _entries.matches(entry)
        if why:
            raise FaShimError(why)
        check(entry.wheel)  # a damaged entry is never installed
    except FaShimError as exc:
        _log.warn(
            f"the cached wheel {entry.wheel} failed its check ({exc.cause}); building it again"
        )
        return None
    _log.info(f"wheel cache hit: {entry.wheel} (fingerprint {entry_key})")
    _failures.published("the wheel cache", entry.wheel)
    return entry.wheel


def served(
    root: Path,
    fingerprint: dict,
    wheel_name: str,
    check: Callable[[Path], None],
    torch_version: str | None = None,
    variants: bool = False,
) -> Path | None:
    """obtain's hit alone: the cached wheel when it is whole and passes `check`, linked into its
    views as obtain links one; None where obtain would build (it takes no lock, builds nothing)."""
    wheel = _hit(root, key(fingerprint), wheel_name, check)
    if not wheel:
        return None
    read_only = _atomic.unwritable(root)
    if read_only:
        _only_reading(f"the wheel cache {root} is not writable ({read_only}): only reading it")
    elif torch_version:
        _torch_view(root, wheel, torch_version, variants)
    return wheel


def _only_reading(why: str) -> None:
    _log.warn(
        f"{why}; a wheel built here is not kept there (name a wheel cache this user can "
        "write with -C wheel-cache-dir=DIR, or turn it off with -C wheel-cache=false)"
    )


def obtain(
    root: Path,
    fingerprint: dict,
    wheel_name: str,
    out_dir: Path,
    check: Callable[[Path], None],
    build: Callable[[], Path],
    lock_timeout: float,
    heartbeat: float,
    built: dict | None = None,
    torch_version: str | None = None,
    variants: bool = False,
) -> Path:
    """The wheel of this fingerprint published into out_dir: the cached one when it passes
    `check`, else a fresh `build()`, stored when the cache is writable (one builder per key; a
    cache whose lock cannot be taken is only read). With torch_version, a hit too is linked
    into that torch's directory (with its variant wheel: `variants`, fleet/_variants)."""
    entry_key = key(fingerprint)
    read_only = _atomic.unwritable(root)  # e.g. shared storage mounted read-only
    if read_only:
        _only_reading(f"the wheel cache {root} is not writable ({read_only}): only reading it")
    # a whole entry needs no lock (entries are renamed into place whole); a miss takes it, and
    # looks again once it holds it: another builder may have stored the wheel meanwhile
    wheel = _hit(root, entry_key, wheel_name, check)
    with contextlib.ExitStack() as stack:
        if not wheel and not read_only:
            try:
                stack.enter_context(locked(root, entry_key, lock_timeout, heartbeat))
            except OSError as exc:
                why = f"{exc.strerror or exc}: {exc.filename or root / '.locks'}"
                _only_reading(
                    f"cannot take a lock in the wheel cache {root} ({why}): only reading it"
                )
                read_only = str(exc)
        if wheel is False:  # None: an entry that failed its check (said once), built again
            wheel = _hit(root, entry_key, wheel_name, check)
        if not wheel:
            wheel = build()
            if not read_only:
                try:
                    _entries.clear_partials(root, entry_key)
                    wheel = _entries.store(root, entry_key, wheel, fingerprint, built or {})
                    _failures.published("the wheel cache", wheel)
                except OSError as exc:  # full, read-only or another user's: the wheel is good
                    why = exc.strerror or str(exc)
                    _log.warn(
                        f"the wheel cache {root} could not keep this wheel ({why}: "
                        f"{exc.filename or root}); the wheel itself is built"
                    )
                    read_only = why
        if torch_version and not read_only:
            _torch_view(root, wheel, torch_version, variants)
        return deliver(wheel, out_dir)


def index_dir(root: Path, view: str) -> Path:
    """The PEP 503 simple index of a view (`torch-<v>`, `torch-<v>/<set>/sm90`: what it holds,
    variants and variants.json included): `pip install --index-url file://<it> flash-attn`, or
    a uv index with `explicit = true` (docs/guides/fleet.md)."""
    return root / "index" / view


def write_index(root: Path, name: str) -> None:
    """The view's index rewritten from it: a page per distribution linking each file relative
    to the page (a share may be mounted elsewhere) with the sha256 its entry recorded."""
    view, index = root / name, index_dir(root, name)
    recorded = {}
    for entry in filter(None, map(_entries.load, _entries.all_entries(root))):
        with contextlib.suppress(OSError):
            recorded[entry.wheel.stat().st_ino] = entry.sha256
    pages: dict[str, list[str]] = {}
    for wheel in sorted([*view.glob("*.whl"), *view.glob(_variants.INDEX_GLOB)]):
        digest = recorded.get(wheel.stat().st_ino) or sha256_of(wheel)  # a copy: no link
        dist = _variants.project(wheel.name)  # a variant wheel's name: packaging parses none
        href = f"{quote(os.path.relpath(wheel, index / dist))}#sha256={digest}"
        pages.setdefault(dist, []).append(f'<a href="{href}">{wheel.name}</a><br>')
    for dist, links in pages.items():
        _entries.make(index / dist, root)
        _entries.keep(index / dist / "index.html", _page(links).encode())
    links = [f'<a href="{dist}/">{dist}</a><br>' for dist in sorted(pages)]
    _entries.keep(index / "index.html", _page(links).encode())


def _page(links: list[str]) -> str:
    return "<!DOCTYPE html>\n<html><body>\n" + "\n".join(links) + "\n</body></html>\n"


def _torch_view(root: Path, wheel: Path, torch_version: str, variants: bool = False) -> None:
    recorded = _recorded(wheel)  # read once: the view and the link both ask it
    view, whom = view_of(recorded, torch_version)
    try:
        names = link_into(root, wheel, view, recorded)
        if variants:  # a variant's name says its archs: each one beside the plain wheel
            _variants.add(root / names[0], wheel, recorded)
        for name in names:
            write_index(root, name)
        keep_installer(root)
    except OSError as exc:  # the entry and the flat copy are kept: a warning, not a failure
        _log.warn(
            f"the wheel is kept in {root}, but not in {root / view} or "
            f"{root / INSTALL_PY} ({exc.strerror or exc}: {exc.filename or root})"
        )
        return
    dist = parse_wheel_filename(wheel.name)[0]
    _log.info(f"teammates with {whom} install it with: {install_line(root, dist)}")


def deliver(wheel: Path, out_dir: Path) -> Path:
    """The finished wheel copied into the frontend's output directory: only a complete wheel
    appears there, and a failure says what was published before it."""
    with _failures.doing(f"copying the wheel into the output directory {out_dir}"):
        path = publish(wheel, out_dir)
    _failures.published("the output directory", path)
    return path
