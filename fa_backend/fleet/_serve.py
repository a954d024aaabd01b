"""The object cache's side in the compiler launcher (resources/launcher.py, which the build runs
with fleet/_compiling's Wrappers): serve one unit from the cache, or compile it and keep its object
when it read no torch or Python header. The keys and the spec: fleet/_objects. As ccache's direct
mode does (https://ccache.dev/manual/latest.html#_the_direct_mode), a unit's key is what is known
before compiling; its entries (`<key>-<includes>`, the manifest) each record the files the compile
read (its depfile) with their sha256, and the one whose files all hash so now is served."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..core import _hostlock, _log
from ..core._digest import sha256_of


def under(path: Path, dirs: Iterable[Path]) -> bool:
    return any(path == d or d in path.parents for d in dirs)


def _value(args: Sequence[str], flag: str) -> str | None:
    values = [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]
    return values[-1] if values else None


def lookup(root: Path, key: str) -> dict | None:
    """The entry's record when it is whole and its object's bytes are the recorded ones."""
    entry = root / key
    try:
        record = json.loads((entry / "object.json").read_text())
        if sha256_of(entry / "object.o") == record["sha256"]:
            return record
    except (OSError, ValueError, KeyError):
        return None
    _log.warn(f"object cache entry {entry} fails its sha256: compiling it again")
    return None


TOOLKIT = "<toolkit>/"  # how a manifest names a file of the toolkit's (its path below it)


def _named(path: Path, spec: dict) -> str:
    """An include as a manifest names it: below the tree, below the toolkit, else absolute."""
    for base, prefix in ((spec["tree"], ""), (spec["toolkit"], TOOLKIT)):
        if base and under(path, [Path(base)]):
            return prefix + str(path.relative_to(base))
    return str(path)


def _hash_now(name: str, spec: dict) -> str | None:
    base, rest = ("toolkit", name[len(TOOLKIT) :]) if name.startswith(TOOLKIT) else ("tree", name)
    try:  # an absolute name stays itself
        return sha256_of(Path(spec[base], rest)) if spec[base] else None
    except OSError:
        return None  # gone: that entry is not this compile's


def find(spec: dict, unit: dict, now: dict | None = None) -> tuple[str, dict] | None:
    """The unit's entry and record whose includes hash now as recorded (`now`: the hashes so
    far, which units share): its C++ ABI's own first, else one every ABI shares."""
    root, own, now = Path(spec["root"]), f".abi{unit['abi']}", {} if now is None else now
    try:
        names = [p.name for p in root.glob(f"{unit['key']}-*")]
    except OSError:
        return None
    names = [n for n in names if n.endswith(own) or ".abi" not in n]
    for name in sorted(names, key=lambda n: (not n.endswith(own), n)):
        try:  # the manifest's line first: an object is hashed only where its includes match
            includes = json.loads((root / name / "object.json").read_text())["includes"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for include in includes.keys() - now.keys():
            now[include] = _hash_now(include, spec)
        record = all(now[n] == sha for n, sha in includes.items()) and lookup(root, name)
        if record:
            return name, record
    return None


def _deps(depfile: Path) -> list[Path]:
    """The files a make-style depfile lists (what the compile read)."""
    text = depfile.read_text().replace("\\\n", " ")
    return [Path(p) for p in text.partition(":")[2].split()]


def _store(root: Path, key: str, obj: Path, record: dict) -> None:
    part = root / f".{key}.part-{uuid.uuid4().hex[:8]}"
    part.mkdir(parents=True)
    try:
        shutil.copyfile(obj, part / "object.o")
        record = {**record, "sha256": sha256_of(part / "object.o")}
        (part / "object.json").write_text(json.dumps(record, indent=1))
        entry = root / key
        if entry.exists():  # one that failed its check: replaced, never linked
            aside = root / f".{key}.bad-{uuid.uuid4().hex[:8]}"
            os.rename(entry, aside)
            shutil.rmtree(aside, ignore_errors=True)
        os.rename(part, entry)
    finally:
        shutil.rmtree(part, ignore_errors=True)


def _place(entry: Path, output: Path, depfile: Path | None, source: str) -> None:
    tmp = output.with_name(f".{output.name}.{uuid.uuid4().hex[:8]}")
    shutil.copyfile(entry / "object.o", tmp)
    os.replace(tmp, output)
    if depfile:  # ninja reads the depfile it asked for
        depfile.write_text(f"{output}: {source}\n")


def _neutral(obj: Path, abi: str) -> bool:
    """Whether an object serves both C++ string ABIs: a new-ABI build naming no symbol it tags
    (`std::__cxx11::`, `[abi:cxx11]`; the old ABI tags nothing) uses no type the ABI changes."""
    return abi == "1" and b"cxx11" not in obj.read_bytes()


def _audit(spec: dict, unit: dict, output: Path, name: str) -> None:
    """`cache check --rebuild`: whether the entry a build would link is what this compile, with
    no cache, gave (a line per unit in the spec's audit file)."""
    found = find(spec, unit)
    line = {"source": name, "sha256": sha256_of(output), "entry": None}
    if found:
        line.update(entry=str(Path(spec["root"]) / found[0]), recorded=found[1]["sha256"])
    with open(spec["audit"], "a") as f:  # one short O_APPEND write per unit: safe across jobs
        f.write(json.dumps(line) + "\n")


def _keep(spec: dict, unit: dict, output: Path, read: list[Path], source: str) -> None:
    """Store the object under its key and the files it read, each with its sha256."""
    includes = {_named(p.resolve(), spec): sha256_of(p) for p in read}
    digest = hashlib.sha256(json.dumps(includes, sort_keys=True).encode()).hexdigest()[:16]
    name = f"{unit['key']}-{digest}"
    record = {"source": source, "built_under": spec["built_under"], "host": socket.gethostname()}
    record.update(flags=unit.get("flags"), includes=includes)
    abi = "" if _neutral(output, unit["abi"]) else f".abi{unit['abi']}"
    _store(Path(spec["root"]), name + abi, output, record)


def serve(
    spec_path: Path, args: Sequence[str], compile: Callable[[], int]
) -> tuple[int, dict | None]:
    """Serve one unit (the launcher's): from the cache, or compiled by `compile()` and stored
    where the cache can keep it (`keep`: the pipeline found it writable, and said so once
    where not). Returns the exit status and, where it came from the cache, the entry's record
    (its key, source, sha256, the torch it was built under, host and flags; not its includes)."""
    spec = json.loads(Path(spec_path).read_text())
    output = _value(args, "-o")
    unit = spec["units"].get(str(Path(output).resolve())) if output else None
    if unit is None:
        return compile(), None
    root, output = Path(spec["root"]), Path(output)
    source = next((a for a in args if a.endswith(".cu") and not a.startswith("-")), "?")
    name = Path(source).name
    if spec.get("audit"):  # compiled, never served or kept, and compared
        code = compile()
        if code == 0:
            _audit(spec, unit, output, name)
        return code, None
    depfile = _value(args, "--dependency-output") or _value(args, "-MF")
    depfile = Path(depfile) if depfile else None

    def served() -> dict | None:
        found = find(spec, unit)
        if found:
            _place(root / found[0], output, depfile, source)
            kept = {k: v for k, v in found[1].items() if k != "includes"}
            return {"key": found[0], **kept}
        return None

    found = served()
    if found or not spec.get("keep", True):
        return (0, found) if found else (compile(), None)
    lock = _hostlock.HostLock(
        root / ".locks" / f"{unit['key']}.lock",
        spec["lock_timeout"],
        spec["heartbeat"],
        lambda holder: _log.info(
            f"another build compiles {name} ({_hostlock.describe(holder)}): waiting for its object"
        ),
        what="object-cache",
        held_by="another build of the same kernel object",
        fix="wait for that build, stop it, or raise -C wheel-cache-lock-timeout.",
    )
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(lock.held())
        except OSError as exc:  # filled or made read-only since the build began
            _log.warn(
                f"the object cache cannot take a lock ({exc.strerror or exc}: "
                f"{exc.filename or lock.path}): compiling {name}, keeping nothing"
            )
            return compile(), None
        found = served()  # the other builder stored it while this one waited
        if found:
            return 0, found
        code = compile()
        if code != 0:
            return code, None
        read = _deps(depfile) if depfile and depfile.is_file() else None
        excluded = [Path(p) for p in spec["excluded"]]
        torch_headers = [str(p) for p in read or [] if under(p.resolve(), excluded)]
        if read is None or torch_headers:
            _log.warn(
                f"{name} read torch or Python headers ({', '.join(torch_headers[:3])}"
                f"{' ...' if len(torch_headers) > 3 else ''}) or left no depfile: its object "
                "depends on them and is not cached"
            )
            return 0, None
        try:
            _keep(spec, unit, output, read, name)
        except OSError as exc:  # a cache that cannot take it costs a compile later, no more
            _log.warn(f"could not keep {name}'s object in {root}: {exc}")
        return 0, None
