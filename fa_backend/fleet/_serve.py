"""The object cache's side in the compiler launcher (resources/launcher.py, which the build runs
with fleet/_cached's Wrappers): serve one unit from the cache, or compile it and keep its object
when it read no torch or Python header. The keys and the spec: fleet/_objects."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..core import _hostlock, _log
from ..core._digest import sha256_of

SPEC_NAME = "fa-shim-objects.json"


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


def _own(unit: dict) -> str:
    return f"{unit['key']}.abi{unit['abi']}"


def find(root: Path, unit: dict) -> tuple[str, dict] | None:
    """The unit's entry and record: its C++ ABI's own, else the one every ABI shares."""
    for key in (_own(unit), unit["key"]):
        record = lookup(root, key)
        if record:
            return key, record
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


def _audit(spec: dict, root: Path, unit: dict, output: Path, source: str) -> None:
    """`cache check --rebuild`: whether the entry a build would link is what this compile, with
    no cache, gave (a line per unit in the spec's audit file)."""
    found = find(root, unit)
    line = {"source": Path(source).name, "sha256": sha256_of(output), "entry": None}
    if found:
        line.update(entry=str(root / found[0]), recorded=found[1]["sha256"])
    with open(spec["audit"], "a") as f:  # one short O_APPEND write per unit: safe across jobs
        f.write(json.dumps(line) + "\n")


def serve(spec_path: Path, args: Sequence[str], compile: Callable[[], int]) -> tuple[int, bool]:
    """Serve one unit (the launcher's): from the cache, or compiled by `compile()` and stored
    where the cache can keep it (`keep`: the pipeline found it writable, and said so once
    where not). Returns the exit status and whether it came from the cache."""
    spec = json.loads(Path(spec_path).read_text())
    output = _value(args, "-o")
    unit = spec["units"].get(str(Path(output).resolve())) if output else None
    if unit is None:
        return compile(), False
    root, output, key = Path(spec["root"]), Path(output), unit["key"]
    source = next((a for a in args if a.endswith(".cu") and not a.startswith("-")), "?")
    if spec.get("audit"):  # compiled, never served or kept, and compared
        code = compile()
        if code == 0:
            _audit(spec, root, unit, output, source)
        return code, False
    depfile = _value(args, "--dependency-output") or _value(args, "-MF")
    depfile = Path(depfile) if depfile else None
    found = find(root, unit)
    if found:
        _place(root / found[0], output, depfile, source)
        return 0, True
    if not spec.get("keep", True):
        return compile(), False
    lock = _hostlock.HostLock(
        root / ".locks" / f"{key}.lock",
        spec["lock_timeout"],
        spec["heartbeat"],
        lambda holder: _log.info(
            f"another build compiles {Path(source).name} ({_hostlock.describe(holder)}): "
            "waiting for its object"
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
                f"{exc.filename or lock.path}): compiling {Path(source).name}, keeping nothing"
            )
            return compile(), False
        found = find(root, unit)
        if found:  # the other builder stored it while this one waited
            _place(root / found[0], output, depfile, source)
            return 0, True
        code = compile()
        if code != 0:
            return code, False
        read = _deps(depfile) if depfile and depfile.is_file() else None
        excluded = [Path(p) for p in spec["excluded"]]
        if read is None or any(under(p.resolve(), excluded) for p in read):
            torch_headers = [str(p) for p in read or [] if under(p.resolve(), excluded)]
            _log.warn(
                f"{Path(source).name} read torch or Python headers ({', '.join(torch_headers[:3])}"
                f"{' ...' if len(torch_headers) > 3 else ''}) or left no depfile: its object "
                "depends on them and is not cached"
            )
            return 0, False
        record = {"source": Path(source).name, "built_under": spec["built_under"]}
        try:
            _store(root, key if _neutral(output, unit["abi"]) else _own(unit), output, record)
        except OSError as exc:  # a cache that cannot take it costs a compile later, no more
            _log.warn(f"could not keep {Path(source).name}'s object in {root}: {exc}")
        return 0, False
