"""PEP 825 wheel variants in a team cache's directories (-C wheel-variants=true,
docs/guides/fleet.md): beside a plain wheel, the same build with `<dist-info>/variant.json`
added, named for its GPU code (`...-linux_x86_64-sm80_sm90.whl`), and the directory's
`{name}-{version}-variants.json`, from which uv (`--preview-features wheel-variants`) picks the
variant for the GPU it sees. pip, and uv without the flag, take the plain wheel (pip cannot
install a variant wheel at all). The formats are the ones uv 0.13.9 takes (issue 55; PEP 825
and PEP 850 define them): a variants.json uv refuses makes the whole version unresolvable for
its users, so one is written only once it is checked against the wheels it describes."""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from ..core import _log
from ..resources.runtime_guard import PROVENANCE
from ..wheel import _wheelfile
from . import _entries

SCHEMA = "https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json"
NAMESPACE = "nvidia"
# uv takes exactly this entry: a versioned `requires` or another key and it picks no variant
PROVIDER = {
    "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin",
    "requires": ["nvidia-variant-provider"],
}
# the PEP's `feature` and `property` priorities make uv refuse the file
HEAD = {
    "$schema": SCHEMA,
    "default-priorities": {"namespace": [NAMESPACE]},
    "providers": {NAMESPACE: PROVIDER},
}
VARIANT_JSON = "variant.json"
INDEX_GLOB = "*-variants.json"
MATCH = "matches its variant wheels: their labels, GPU code, RECORDs and entries"
_VALUE = re.compile(r"[0-9a-z_.]+")  # a label and a feature value (PEP 825)
_FEATURE = re.compile(r"[0-9a-z_]+")
# arch-specific code runs on its own GPU alone, which `<n>_real` says only where that GPU is
# the one of its major (the provider matches 100_real on 10.3 too)
_SOLE = {"90a": "90"}


def variant_of(recorded: dict) -> tuple[str, dict] | None:
    """A wheel's label and properties, from its provenance: the GPUs it holds code for
    (`sm_arch` `<arch>_real`, which the NVIDIA provider matches within a major: 80_real on 8.0,
    8.6 and 8.9, never on 9.0) and the CUDA driver its runtime needs (torch's CUDA release; a
    stable-ABI module runs on the runtime of any torch of that major: the major). None for a
    wheel without GPU code, or with code no value says."""
    archs = sorted(map(str, recorded.get("cuda_archs") or []), key=_arch_order)
    torch = recorded.get("torch") or {}
    cuda = str(torch.get("cuda") or "").split(".")
    bases = [a if a.isdigit() else _SOLE.get(a) for a in archs]
    if not archs or not cuda[0] or None in bases:
        return None
    bound = cuda[0] if torch.get("stable_abi") else ".".join(cuda[:2])
    sm = list(dict.fromkeys(f"{base}_real" for base in bases))
    return label(archs), {NAMESPACE: {"cuda_version_lower_bound": [bound], "sm_arch": sm}}


def _arch_order(arch: str) -> tuple[int, str]:
    return int(re.match(r"\d*", arch).group() or 0), arch


def label(archs: list) -> str:
    """The GPU code of an arch set as one name, `sm80_sm90a` ("" for none): a variant's label,
    and the directory of that arch set's plain wheels in a view (fleet/_wheel_cache)."""
    return "_".join(f"sm{a}" for a in sorted(map(str, archs or ()), key=_arch_order))


def split(filename: str) -> tuple[str, str | None]:
    """A wheel's file name without its variant label, and the label (None: a plain wheel).
    packaging parses no label: a name it refuses is the plain name and a last part."""
    try:
        parse_wheel_filename(filename)
        return filename, None
    except InvalidWheelFilename:
        stem, _, label = filename.removesuffix(".whl").rpartition("-")
        parse_wheel_filename(stem + ".whl")  # neither: raises
        if not _VALUE.fullmatch(label) or label == "null":
            raise
        return stem + ".whl", label


def index_name(wheel_name: str) -> str:
    """The `{name}-{version}-variants.json` of a wheel's version (both normalised as in a
    wheel's file name)."""
    name, version, _, _ = parse_wheel_filename(split(wheel_name)[0])
    return f"{name.replace('-', '_')}-{version}-variants.json"


def project(filename: str) -> str:
    """The project whose index page lists a file of a view: a wheel, plain or variant, or a
    variants.json."""
    if filename.endswith("-variants.json"):
        return canonicalize_name(filename.rsplit("-", 2)[0])
    return canonicalize_name(parse_wheel_filename(split(filename)[0])[0])


def _dumps(doc: dict) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def _dist_info(zf: zipfile.ZipFile) -> str:
    (record,) = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    return record.split("/")[0]


def _members(zf: zipfile.ZipFile) -> dict[str, tuple]:
    """The members' RECORD hashes with the CRC and size the zip's directory holds, variant.json
    and RECORD aside: what a plain wheel and its variant share (equal: the same bytes, known
    without decompressing them, which cost a hit 0.15 s: bench/results/2026-12-02-h200-hit-cost)."""
    dist_info = _dist_info(zf)
    text = zf.read(f"{dist_info}/RECORD").decode()
    rows = {r[0]: r[1] for r in csv.reader(io.StringIO(text)) if len(r) > 1}
    own = (f"{dist_info}/RECORD", f"{dist_info}/{VARIANT_JSON}")
    return {
        i.filename: (rows.get(i.filename), i.CRC, i.file_size)
        for i in zf.infolist()
        if i.filename not in own and not i.is_dir()
    }


def _variant_json(wheel: Path) -> dict | None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            return json.loads(zf.read(f"{_dist_info(zf)}/{VARIANT_JSON}"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None


def write_variant(plain: Path, directory: Path, label: str, props: dict) -> Path:
    """The variant of the wheel `plain` in directory: its members as they are, its
    variant.json added, its RECORD written anew; left as it is when it already is that, whole
    (a member edited since, its CRC or size other, is written again)."""
    stem, _, _ = plain.name.rpartition(".whl")
    target = directory / f"{stem}-{label}.whl"
    doc = {**HEAD, "variants": {label: props}}
    with zipfile.ZipFile(plain) as zf:
        members = _members(zf)
        try:
            with zipfile.ZipFile(target) as old:
                if _members(old) == members and _variant_json(target) == doc:
                    return target  # nothing added, nothing edited
        except (OSError, KeyError, ValueError, zipfile.BadZipFile):
            pass  # none yet, or not this build's variant: written anew
        dist_info = _dist_info(zf)
        writer = _wheelfile.WheelWriter(target, dist_info)
        for info in zf.infolist():
            if not info.is_dir() and info.filename != f"{dist_info}/RECORD":
                mode = info.external_attr >> 16
                writer.add_stream(info.filename, lambda i=info: zf.open(i), info.file_size, mode)
        writer.add(f"{dist_info}/{VARIANT_JSON}", _dumps(doc))
        return writer.write()


def invalid(doc: object) -> list[str]:
    """What in a variants.json makes uv 0.13.9 refuse it or pick no variant from it."""
    if not isinstance(doc, dict):
        return ["it is not a JSON object"]
    found = [f"its {key} is not {value}" for key, value in HEAD.items() if doc.get(key) != value]
    found += [f"it has a key {key!r} uv does not take" for key in set(doc) - {*HEAD, "variants"}]
    variants = doc.get("variants")
    if not isinstance(variants, dict) or not variants:
        return [*found, "it names no variant"]
    for label, props in variants.items():
        if not _VALUE.fullmatch(label) or label == "null":
            found.append(f"{label!r} is not a variant label")
        features = props.get(NAMESPACE) if isinstance(props, dict) else None
        if not isinstance(features, dict) or set(props) != {NAMESPACE} or not features:
            found.append(f"{label}: not properties of the {NAMESPACE} namespace alone")
            continue
        for feature, values in features.items():
            if not _FEATURE.fullmatch(feature) or not isinstance(values, list) or not values:
                found.append(f"{label}: {feature!r} is not a feature with values")
            elif not all(isinstance(v, str) and _VALUE.fullmatch(v) for v in values):
                found.append(f"{label}: {feature} has a value that is not one")
    return found


def _variant_wheels(directory: Path) -> dict[str, list[tuple[Path, str]]]:
    """The directory's variant wheels and their labels, by the variants.json of their version."""
    groups: dict[str, list[tuple[Path, str]]] = {}
    for path in sorted(directory.glob("*.whl")):
        try:
            label = split(path.name)[1]
        except InvalidWheelFilename:
            continue
        if label:
            groups.setdefault(index_name(path.name), []).append((path, label))
    return groups


def expected(wheels: list[tuple[Path, str]]) -> tuple[dict, list[str]]:
    """The variants.json of these variant wheels, from their variant.json files, and what keeps
    it from being written: a wheel whose variant.json is not the head and its own label, two
    wheels that give one label other properties."""
    variants: dict[str, dict] = {}
    wrong = []
    for path, label in wheels:
        doc = _variant_json(path)
        doc = doc if isinstance(doc, dict) else {}
        own = doc.get("variants") if isinstance(doc.get("variants"), dict) else {}
        if {k: v for k, v in doc.items() if k != "variants"} != HEAD or list(own) != [label]:
            wrong.append(f"{path.name}: its {VARIANT_JSON} is not fa-shim's for the label {label}")
            continue
        mine = own[label]
        if variants.setdefault(label, mine) != mine:
            wrong.append(f"{path.name}: another wheel here gives {label} other properties")
    doc = {**HEAD, "variants": dict(sorted(variants.items()))}
    return doc, wrong + invalid(doc)


def refresh(directory: Path, name: str) -> None:
    """The directory's variants.json `name` rewritten from its variant wheels (whole, by one
    rename) when they agree and it is valid; else the old one stays, and a warning says why."""
    doc, wrong = expected(_variant_wheels(directory).get(name, []))
    target = directory / name
    if wrong:
        _log.warn(
            f"{target} is not rewritten: {'; '.join(wrong)}; uv reads the one there, if any, "
            "as it was (remove the wheel named: the next build or hit rewrites it)"
        )
        return
    _entries.keep(target, _dumps(doc))


def add(directory: Path, wheel: Path, recorded: dict) -> None:
    """The variant of `wheel` (its provenance `recorded`) beside the plain wheels of a view,
    then that version's variants.json rewritten from every variant there."""
    variant = variant_of(recorded)
    if variant is None:
        _log.info(f"no variant of {wheel.name}: it holds no GPU code a variant label names")
        return
    path = write_variant(wheel, directory, *variant)
    refresh(directory, index_name(wheel.name))
    _log.info(f"uv --preview-features wheel-variants takes {path} where its GPUs are")


def check(root: Path) -> list[tuple[str, str, list[str]]]:
    """Each variants.json of root's directories against the variant wheels beside it: its path
    under root, what it describes, and what is wrong (nothing: it matches)."""
    built: dict[str, list[dict[str, str]]] = {}  # an entry's wheel: what its variants hold
    for entry in filter(None, map(_entries.load, _entries.all_entries(root))):
        try:
            with zipfile.ZipFile(entry.wheel) as zf:
                built.setdefault(entry.wheel.name, []).append(_members(zf))
        except (OSError, KeyError, ValueError, zipfile.BadZipFile):
            continue  # its own row says why
    views = ("*/*.whl", "*/*/*.whl", f"*/{INDEX_GLOB}", f"*/*/{INDEX_GLOB}")  # a torch's, a set's
    rows = []
    for directory in sorted({p.parent for glob in views for p in root.glob(glob)}):
        groups = _variant_wheels(directory)
        for name in sorted({*groups, *(p.name for p in directory.glob(INDEX_GLOB))}):
            wheels = groups.get(name, [])
            doc, wrong = expected(wheels)
            try:
                listed = json.loads((directory / name).read_text(encoding="utf-8"))
                if not wheels:
                    wrong = ["no variant wheel of its version is here (one was removed)"]
                elif listed != doc:
                    wrong += invalid(listed) or [f"its wheels give {doc['variants']}"]
            except (OSError, ValueError) as exc:
                wrong.append(f"no variants.json uv can read ({exc})")
            for path, label in wheels:
                wrong += [f"{path.name}: {why}" for why in _wheel(path, label, doc, built)]
            what = f"{len(wheels)} variant wheel(s): {', '.join(sorted(doc['variants'])) or '-'}"
            rows.append((str((directory / name).relative_to(root)), what, wrong))
    return rows


def _wheel(path: Path, label: str, doc: dict, built: dict[str, list[dict[str, str]]]) -> list[str]:
    """What is wrong with one variant wheel: its RECORD, its label against the GPU code its
    provenance records, its members against those of an entry's wheel of its plain name."""
    try:
        found = _wheelfile.problems(path, 3)
        with zipfile.ZipFile(path) as zf:
            if _members(zf) not in built.get(split(path.name)[0], []):
                found.append("not the members of an entry's wheel (another build's variant)")
            recorded = json.loads(zf.read(f"{_dist_info(zf)}/{PROVENANCE}"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        return [f"unreadable: {exc}"]
    if variant_of(recorded) != (label, doc["variants"].get(label)):
        found.append(f"its label {label} is not the GPU code its provenance records")
    return found
