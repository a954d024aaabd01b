"""PEP 825 variant wheels in the wheel cache's views (fa_backend/fleet/_variants.py) in-process,
on real wheels the wheel writer makes: what each view holds with -C wheel-variants=true, the
variants.json uv reads (the formats uv 0.13.9 takes, issue 55), one never written bad, and
`cache check`'s reading of it. uv picking them by GPU, pip and uv without the flag taking the
plain wheel: tests/e2e/test_wheel_variants.py."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from fa_backend.fleet import _variants, _wheel_cache
from fa_backend.wheel._wheelfile import WheelWriter, problems

VERSION = "0.1.0+cu130torch2.11"
DIST_INFO = f"flash_attn-{VERSION}.dist-info"
VIEW = "torch-2.11.0+cu130"
INDEX = f"flash_attn-{VERSION}-variants.json"
PROVIDERS = {
    "nvidia": {
        "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin",
        "requires": ["nvidia-variant-provider"],
    }
}
HEAD = {
    "$schema": "https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json",
    "default-priorities": {"namespace": ["nvidia"]},
    "providers": PROVIDERS,
}


def sm(*archs: str, cuda: str = "13.0") -> dict:
    return {"nvidia": {"cuda_version_lower_bound": [cuda], "sm_arch": [f"{a}_real" for a in archs]}}


def built(tmp: Path, archs: list[str], tag: str = "cp311", cuda: str | None = "13.0") -> Path:
    """A wheel as a build leaves it: a module, METADATA and the provenance its GPU code is in."""
    name = f"flash_attn-{VERSION}-{tag}-{tag}-linux_x86_64.whl"
    path = tmp / "built" / f"{tag}-{'-'.join(archs) or 'cpu'}" / name
    path.parent.mkdir(parents=True)
    writer = WheelWriter(path, DIST_INFO)
    writer.add("flash_attn_2_cuda.so", f"code for {archs}".encode(), 0o755)
    writer.add(f"{DIST_INFO}/METADATA", f"Name: flash-attn\nVersion: {VERSION}\n".encode())
    prov = {"cuda_archs": archs, "torch": {"cuda": cuda, "stable_abi": None}}
    writer.add(f"{DIST_INFO}/fa_shim_provenance.json", json.dumps(prov).encode())
    return writer.write()


def obtain(root: Path, wheel: Path, variants: bool = True) -> Path:
    """The build of `wheel` through the wheel cache, as pipeline/_build calls it."""
    fingerprint = {"wheel": str(wheel)}
    return _wheel_cache.obtain(
        root, fingerprint, wheel.name, root.parent / "out", lambda w: None, lambda: wheel,
        600, 15, torch_version="2.11.0+cu130", variants=variants,
    )  # fmt: skip


def members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        return {n: zf.read(n) for n in zf.namelist() if not n.endswith("/RECORD")}


def test_each_arch_set_gets_a_variant_beside_the_plain_wheel_and_one_variants_json(tmp_path):
    """Two builds for other GPUs (=80, then =90): the view keeps the first plain wheel (pip's
    and uv's without the flag) and holds both variants, each the same build's members plus its
    variant.json, with a RECORD that checks, and the variants.json uv reads lists both; the
    view's index links all of them; a hit rewrites nothing but a variant edited since."""
    root = tmp_path / "fa"
    a80, a90 = built(tmp_path, ["80"]), built(tmp_path, ["90"])
    obtain(root, a80)
    obtain(root, a90)
    view = root / VIEW
    plain = a80.name
    stem = plain.removesuffix(".whl")
    assert sorted(p.name for p in view.iterdir()) == sorted(
        [plain, f"{stem}-sm80.whl", f"{stem}-sm90.whl", INDEX, "sm80", "sm90"]
    )  # sm80/, sm90/: each arch set's plain wheel (test_wheel_cache.py)
    assert json.loads((view / INDEX).read_text()) == {
        **HEAD,
        "variants": {"sm80": sm("80"), "sm90": sm("90")},
    }
    for label, source in (("sm80", a80), ("sm90", a90)):
        variant = view / f"{stem}-{label}.whl"
        assert problems(variant) == []
        got = members(variant)
        doc = json.loads(got.pop(f"{DIST_INFO}/variant.json"))
        assert doc == {**HEAD, "variants": {label: sm(label[2:])}}
        assert got == members(source)
    page = (root / "index" / VIEW / "flash-attn" / "index.html").read_text()
    for name in (plain, f"{stem}-sm80.whl", f"{stem}-sm90.whl", INDEX):
        assert f">{name}</a>" in page
    assert _variants.check(root) == [
        (f"{VIEW}/{INDEX}", "2 variant wheel(s): sm80, sm90", []),
    ]
    before = {p.name: p.stat().st_mtime_ns for p in view.iterdir()}
    obtain(root, a90)  # a hit
    assert {p.name: p.stat().st_mtime_ns for p in view.iterdir()} == before
    with zipfile.ZipFile(view / f"{stem}-sm90.whl", "a") as zf:
        zf.writestr("flash_attn/extra.py", b"edited in the cache")
    obtain(root, a90)  # the next hit writes it again
    assert problems(view / f"{stem}-sm90.whl") == [] and _variants.check(root)[0][2] == []


def test_without_the_setting_a_view_holds_no_variant_and_keeps_anothers(tmp_path):
    """Off (the default) no variant is made; a view where another builder made them still
    gets its index, which keeps linking them (a variant's name is not one packaging parses)."""
    root = tmp_path / "fa"
    a80 = built(tmp_path, ["80"])
    obtain(root, a80, variants=False)
    assert sorted(p.name for p in (root / VIEW).iterdir()) == [a80.name, "sm80"]
    obtain(root, built(tmp_path, ["90"]))
    obtain(root, built(tmp_path, ["80"], tag="cp312"), variants=False)
    page = (root / "index" / VIEW / "flash-attn" / "index.html").read_text()
    assert "-sm90.whl</a>" in page and f">{INDEX}</a>" in page and "cp312" in page


THREE = sm("80", "90", "120", cuda="12.8")


@pytest.mark.parametrize(
    "archs, cuda, stable, want",
    [
        (["80", "90"], "13.0", None, ("sm80_sm90", sm("80", "90"))),
        (
            ["120", "90", "80"],
            "12.8",
            None,
            ("sm80_sm90_sm120", sm("80", "90", "120", cuda="12.8")),
        ),
        (["90"], "13.0", "2.10", ("sm90", sm("90", cuda="13"))),  # any torch of CUDA 13
        (["90a"], "13.0", None, ("sm90a", sm("90"))),  # 9.0 is the one GPU of its major
        (["100a"], "13.0", None, None),  # 100_real would take a 10.3 GPU too
        ([], "13.0", None, None),
        (["80"], None, None, None),
    ],
)
def test_a_variant_says_the_gpu_code_and_the_cuda_driver(archs, cuda, stable, want):
    recorded = {"cuda_archs": archs, "torch": {"cuda": cuda, "stable_abi": stable}}
    assert _variants.variant_of(recorded) == want


def test_names_of_plain_and_variant_wheels():
    plain = f"flash_attn-{VERSION}-cp311-cp311-linux_x86_64.whl"
    assert _variants.split(plain) == (plain, None)
    assert _variants.split(plain.replace(".whl", "-sm80_sm90.whl")) == (plain, "sm80_sm90")
    built_tag = "flash_attn-1.0-1-cp311-cp311-linux_x86_64.whl"  # a build tag: a plain wheel
    assert _variants.split(built_tag) == (built_tag, None)
    assert _variants.split(built_tag.replace(".whl", "-sm90.whl"))[1] == "sm90"
    for bad in ("flash_attn-1.0-cp311-cp311-linux_x86_64-SM90.whl", "x-1.0-a-b-c-null.whl"):
        with pytest.raises(ValueError):
            _variants.split(bad)
    assert _variants.index_name(plain) == INDEX
    assert {_variants.project(n) for n in (plain, INDEX, built_tag)} == {"flash-attn"}


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda d: d["default-priorities"].update(feature={"nvidia": ["sm_arch"]}), "priorities"),
        (lambda d: d["providers"]["nvidia"].update(requires=["nvidia-variant-provider>=0.1"]), ""),
        (lambda d: d["providers"]["nvidia"].update({"enable-if": "x"}), "providers"),
        (lambda d: d.pop("providers"), "providers"),
        (lambda d: d.update(extra=1), "'extra'"),
        (lambda d: d.update(variants={}), "no variant"),
        (lambda d: d["variants"].update(null={}), "'null' is not a variant label"),
        (lambda d: d["variants"]["sm90"]["nvidia"].update(sm_arch=["90 real"]), "not one"),
        (lambda d: d["variants"]["sm90"].update(x86_64={"level": ["v3"]}), "namespace alone"),
    ],
)
def test_what_uv_refuses_or_picks_nothing_from_is_invalid(change, why):
    doc = json.loads(json.dumps({**HEAD, "variants": {"sm90": sm("90")}}))
    assert _variants.invalid(doc) == []
    change(doc)
    found = _variants.invalid(doc)
    assert found and why in "; ".join(found)


def test_a_bad_variants_json_is_never_written(tmp_path, capfd):
    """A variant wheel that gives its label other properties (an older build's) stops the
    rewrite: the valid variants.json uv reads stays as it was, a warning names the wheel, and
    `cache check` names it too."""
    root = tmp_path / "fa"
    obtain(root, built(tmp_path, ["90"]))
    view = root / VIEW
    listed = (view / INDEX).read_bytes()
    stale = built(tmp_path, ["90"], tag="cp312", cuda="12.8")
    _variants.write_variant(stale, view, "sm90", sm("90", cuda="12.8"))  # by an older fa-shim
    obtain(root, built(tmp_path, ["80"]))
    assert (view / INDEX).read_bytes() == listed
    err = capfd.readouterr().err
    assert f"{view / INDEX} is not rewritten: " in err
    assert "-cp312-linux_x86_64-sm90.whl: another wheel here gives sm90 other properties" in err
    ((key, _, wrong),) = _variants.check(root)
    assert key == f"{VIEW}/{INDEX}" and any("other properties" in w for w in wrong)
    assert any(
        "cp312-linux_x86_64-sm90.whl: its label sm90 is not the GPU code" in w for w in wrong
    )


def test_cache_check_finds_what_does_not_match_the_wheels(tmp_path):
    """A variants.json edited by hand, a variant with a member its RECORD does not list, one
    left without its variants.json, and a variants.json whose wheels were removed: each named."""
    root = tmp_path / "fa"
    obtain(root, built(tmp_path, ["80"]))
    obtain(root, built(tmp_path, ["90"]))
    view = root / VIEW
    doc = json.loads((view / INDEX).read_text())
    doc["variants"]["sm90"] = sm("90", cuda="12.0")
    (view / INDEX).write_text(json.dumps(doc))
    ((_, _, wrong),) = _variants.check(root)
    assert wrong == [f"its wheels give {{'sm80': {sm('80')}, 'sm90': {sm('90')}}}"]

    variant = next(view.glob("*-sm90.whl"))
    with zipfile.ZipFile(variant, "a") as zf:
        zf.writestr("flash_attn_2_cuda.so.extra", b"more")
    (view / INDEX).unlink()
    ((key, what, wrong),) = _variants.check(root)
    assert key == f"{VIEW}/{INDEX}" and what == "2 variant wheel(s): sm80, sm90"
    assert wrong[0].startswith("no variants.json uv can read")
    assert f"{variant.name}: flash_attn_2_cuda.so.extra is not in RECORD" in wrong

    for path in view.glob("*-sm*.whl"):
        path.unlink()
    (view / INDEX).write_text(json.dumps(doc))
    assert _variants.check(root) == [
        (f"{VIEW}/{INDEX}", "0 variant wheel(s): -", [
            "no variant wheel of its version is here (one was removed)",
        ]),
    ]  # fmt: skip
