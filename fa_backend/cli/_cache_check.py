"""Auditing a wheel cache (`python -m fa_backend cache ...`, docs/guides/fleet.md): `check`
(sha256, RECORD, verify; its objects; what killed writers left, which `--sweep` removes; index
links to wheels that are gone), `check --rebuild` (the bytes of a rebuild here with no cache, its
wheel and each object) and `requirements` (the hashed line of what install.py takes here)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import time
import zipfile
from pathlib import Path
from urllib.parse import unquote

from packaging.version import Version

from ..core import _log
from ..core._digest import sha256_of
from ..core._errors import FaShimError
from ..fleet import _entries, _objects, _variants
from ..resources.runtime_guard import PROVENANCE
from ..wheel import _wheelfile

OK, FAILED = "ok", "FAILED"


@dataclasses.dataclass
class Row:
    key: str
    wheel: str = "-"
    result: str = FAILED
    reason: str = ""


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _this_torch():
    """The running interpreter's torch, as a build probes it (never imported here); None."""
    from ..settings import _model
    from ..toolchain import _torch

    try:
        with _log.quiet():
            return _torch.probe(None, _model.default_cache_dir() / "torch-probes")
    except FaShimError:
        return None


def check_entry(directory: Path, torch) -> Row:
    row = Row(directory.name)
    gone = f"; remove it (rm -r {directory}): the next build of it stores it again"
    entry = _entries.load(directory)
    if entry is None:
        row.reason = f"incomplete: no {_entries.ENTRY} naming a wheel that is there" + gone
        return row
    row.wheel = entry.wheel.name
    try:
        why = _entries.matches(entry)
        if why:
            row.reason = f"not the wheel it stored: {why}" + gone
            return row
        found = _wheelfile.problems(entry.wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        row.reason = f"unreadable: {exc}" + gone
        return row
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        row.reason = f"RECORD does not match: {found[0]}{more}{gone}"
        return row
    built_for = (_json(directory / _entries.FINGERPRINT).get("torch") or [None])[0]
    if built_for is None:
        row.reason = f"incomplete: no readable {_entries.FINGERPRINT} (its inputs)" + gone
        return row
    if torch is None or built_for != torch.version:
        row.result = OK
        here = f"this environment has {torch.version}" if torch else "no torch here"
        row.reason = f"hash and RECORD; verify skipped: built for torch {built_for} ({here})"
        return row
    from ..verify import _verify

    report = _verify.verify_wheel(entry.wheel, torch)
    if not report.ok:
        row.reason = f"verify: {report.summary()}"
        return row
    row.result, row.reason = OK, f"hash, RECORD and verify: {report.summary()}"
    return row


def _object_row(directory: Path) -> Row:
    """An object-cache entry beside the wheels (fleet/_objects): whole, its recorded bytes."""
    why = _objects.check(directory)
    record = _json(directory / "object.json")
    row = Row(directory.name, f"object {record.get('source', '?')}", FAILED if why else OK)
    built = f"built under {record.get('built_under', '?')} on {record.get('host', '?')}"
    row.reason = why or f"sha256 ok; {built}"
    return row


def rebuild(root: Path, config: dict[str, str]) -> list[Row]:
    """Build this environment's wheel again, here, with no object cache and no compiler cache,
    and compare its bytes with the entry's, and each object with the entry a build links."""
    from ..fleet import _cached, _compiling, _wheel_cache
    from ..pipeline import api as pipeline

    plan = pipeline.plan(config)
    tools = _cached.toolchain(plan)
    key = _wheel_cache.key(pipeline.fingerprint(plan, tools))
    entry = _entries.load(root / key, plan.wheel_name)
    objects = _objects.root_of(plan.settings)
    if entry is None and not _objects.entries(objects):
        raise FaShimError(
            f"{root} has no entry for this environment's fingerprint {key} ({plan.wheel_name}), "
            f"and {objects} no kernel object.",
            fix="run --rebuild with the interpreter and the -C settings the entry was built "
            "with (its fingerprint.json lists what they decide); `cache check` alone checks "
            "every entry.",
        )
    if entry is not None:  # the object layout the entry has
        recorded = _provenance(entry.wheel)
        shape = {knob: recorded.get(knob, value) for knob, value in tools.shape.items()}
        tools = dataclasses.replace(tools, shape=shape)
    tools = dataclasses.replace(tools, compiler_cache=None)  # an independent compile
    _log.info(f"rebuilding {plan.wheel_name} (fingerprint {key}) with no cache to compare")
    rows = []
    with pipeline.scratch_dir(plan.settings) as scratch:
        audit = scratch / "objects-audit.jsonl"
        fresh = _compiling.fresh_wheel(
            plan, tools, scratch, audit=audit, objects_only=entry is None
        )
        if entry is not None:
            rows.append(_rebuilt(Row(key, entry.wheel.name), entry.wheel, entry.sha256, fresh))
        lines = audit.read_text().splitlines() if audit.is_file() else []
    rows += [r for r in map(_audited, map(json.loads, lines)) if r]
    if not rows:
        raise FaShimError(
            f"the rebuild compiled none of the objects in {objects}, and {root} has no entry "
            f"for its fingerprint {key}: nothing to compare.",
            fix="run --rebuild with the interpreter and the -C settings of the build to check.",
        )
    return rows


def _audited(line: dict) -> Row | None:
    """An object a build would link, against what the rebuild compiled (None: none cached)."""
    if not line.get("entry"):
        return None
    entry = Path(line["entry"])
    row = Row(entry.name, f"object {line['source']}")
    if line["recorded"] == line["sha256"]:
        row.result, row.reason = OK, f"the rebuild compiles it byte for byte ({line['sha256']})"
    else:
        row.reason = (
            f"not what its inputs compile to: the rebuild's {line['source']} has sha256 "
            f"{line['sha256']}, the entry {line['recorded']}; a build links it until it is "
            f"removed (rm -r {entry})"
        )
    return row


def _rebuilt(row: Row, wheel: Path, had: str, fresh: Path) -> Row:
    """The entry's wheel (sha256 `had`) against the rebuild's: the same bytes, or the same but
    for the objects its provenance says the object cache gave (the rebuild compiles each, and
    each is compared on its own row)."""
    got, differ = sha256_of(fresh), _differing(wheel, fresh)
    prov, again = _provenance(wheel), _provenance(fresh)
    reused = len(prov.pop("reused_objects", None) or [])
    again.pop("reused_objects", None)  # the rebuild compiled every kernel
    only_provenance = [n.endswith(f".dist-info/{PROVENANCE}") for n in differ] == [True]
    if got == had:
        row.result, row.reason = OK, f"rebuilt byte for byte (sha256 {got})"
    elif reused and only_provenance and prov == again:
        row.result = OK
        row.reason = f"rebuilt byte for byte but the provenance's {reused} reused kernel objects"
    else:
        row.reason = (
            f"not what its fingerprint builds: the rebuild's sha256 is {got}, the entry's "
            f"{had}; members that differ: {', '.join(differ[:8]) or 'none (the zip itself)'}"
        )
    return row


def _provenance(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        return json.loads(zf.read(next(n for n in zf.namelist() if n.endswith(PROVENANCE))))


def _differing(a: Path, b: Path) -> list[str]:
    """The members whose RECORD rows differ."""

    def rows(wheel: Path) -> dict[str, str]:
        with zipfile.ZipFile(wheel) as zf:
            record = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
            lines = zf.read(record).decode().splitlines()
        return dict(line.rsplit(",", 2)[:2] for line in lines if line.count(",") >= 2)

    old, new = rows(a), rows(b)
    return sorted(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))


def requirements(root: Path) -> list[str]:
    """`name==version --hash=sha256:...` per distribution: the entry the cache's install.py
    takes here (resources/team_install.py: one choice for both)."""
    from ..resources import team_install

    lines, misses = [], []
    for dist in sorted({e.dist.replace("_", "-") for e in team_install.entries(str(root))}):
        try:
            entry, _ = team_install.choose(str(root), dist, "full", None)
        except team_install.Miss as exc:
            misses.append(str(exc))
            continue
        version = Version(entry.version)  # normalized, as pip writes it
        lines.append(f"{dist}=={version} --hash=sha256:{entry.record['sha256']}")
    if not lines:
        text = "\n".join(misses) or f"{root} holds no wheel-cache entry"
        cause, _, details = text.partition("\n")
        fix = "run the build line it names, or name another wheel cache."
        raise FaShimError(cause, fix=fix, details=details or None)
    for miss in misses:
        _log.warn(miss)
    return lines


def stray_rows(root: Path, sweep: bool) -> list[Row]:
    """A row for each writer's temporary name left in the cache or its objects: a failure once
    older than a live write can be (younger: maybe a build writing now), which `sweep` removes."""
    found = [*root.glob(_entries.PARTIAL), *root.glob(f"*/{_entries.PARTIAL}")]
    rows = []
    for path in sorted(found) + _objects.leftovers(root / "objects"):
        try:
            age = time.time() - path.lstat().st_mtime
        except OSError:
            continue  # gone meanwhile: its writer finished
        old = age > _entries.SWEEP_AGE_S
        row = Row(str(path.relative_to(root)), result=FAILED if old else "stray")
        kind = "directory" if path.is_dir() and not path.is_symlink() else "file"
        row.reason = f"a writer's temporary {kind}, " + (
            f"{age / 3600:.1f} h old: left by a killed build or an older fa-shim; "
            "`cache check --sweep` removes it"
            if old
            else f"{age:.0f} s old: perhaps a build writing now"
        )
        if old and sweep:
            try:
                shutil.rmtree(path) if kind == "directory" else path.unlink()
            except OSError as exc:
                row.reason = f"could not remove it ({exc.strerror or exc}: {exc.filename})"
            else:
                row.result, row.reason = OK, f"removed (a leftover {age / 3600:.1f} h old)"
        rows.append(row)
    return rows


_HREF = re.compile(r'href="([^"#]+)#sha256=')


def stale_links(root: Path) -> list[Row]:
    """Each index page's link to a wheel that is gone (deleted by hand): pip and uv fail on the
    whole index. The next build or hit for that view writes its index again from what is there."""
    rows = []
    for page in sorted((root / "index").rglob("index.html")):  # a view's: a set's, an arch set's
        with contextlib.suppress(OSError, UnicodeDecodeError):
            for href in _HREF.findall(page.read_text(encoding="utf-8")):
                wheel = Path(os.path.normpath(page.parent / unquote(href)))
                if not wheel.is_file():
                    row = Row(str(page.parent.relative_to(root)), wheel.name)
                    row.reason = (
                        f"the index links {wheel}, which is gone: pip and uv fail on this index "
                        "until the next build or hit for that torch here writes it again"
                    )
                    rows.append(row)
    return rows


def render(rows: list[Row]) -> str:
    lines = [f"{r.result:6}  {r.key}  {r.wheel}\n        {r.reason}" for r in rows]
    failed = sum(r.result != OK for r in rows)
    stray = sum(r.result == "stray" for r in rows)
    summary = f"cache check: {sum(r.result == OK for r in rows)} ok, {failed - stray} failed"
    lines.append(summary + (f", {stray} being written" if stray else ""))
    return "\n".join(lines)


def main(action: str, root: Path, rebuild_one: bool, config: dict[str, str], sweep=False) -> int:
    if not root.is_dir():
        raise FaShimError(f"{root} is not a directory.", fix="name a wheel-cache directory.")
    if action == "requirements":
        print("\n".join(requirements(root)))
        return 0
    if rebuild_one:
        if sweep:
            raise FaShimError("--sweep and --rebuild are two runs.", fix="run them one by one.")
        rows = rebuild(root, config)
    else:
        entries = _entries.all_entries(root)
        torch = _this_torch() if entries else None  # a child: only for entries to verify
        rows = [check_entry(d, torch) for d in entries]
        rows += [_object_row(d) for d in _objects.entries(root / "objects")]
        rows += stray_rows(root, sweep) + stale_links(root)
        for key, what, bad in _variants.check(root):  # uv's variants.json (fleet/_variants)
            rows.append(Row(key, what, FAILED if bad else OK, "; ".join(bad) or _variants.MATCH))
        if not rows:
            wheels = root / "wheels"  # a cache-dir's own wheel cache (settings/_model)
            fix = f"check its wheel cache: python -m fa_backend cache check {wheels}"
            if not _entries.all_entries(wheels):
                fix = "name a wheel cache: the directory a build's -C wheel-cache-dir names."
            raise FaShimError(f"{root} holds no wheel-cache entry.", fix=fix)
    print(render(rows))
    return 0 if all(r.result in (OK, "stray") for r in rows) else 1
