"""cli/_cache_check in-process, on a real wheel cache made by fleet/_wheel_cache.obtain: the
links of a torch's PEP 503 index to wheels that are gone are rows of their own (issue 54's TC07);
each damaged entry's row names the `rm -r` that clears it, and `cache check` of a cache-dir names
its wheels/ (issue 54's C01, C03, C05, C09, C14). Through the command line, on the sample
built by pip: tests/integration/test_cache_trust.py."""

from __future__ import annotations

import json
import shutil
import zipfile

import pytest

from fa_backend.cli import _cache_check
from fa_backend.core._digest import sha256_of
from fa_backend.core._errors import FaShimError
from fa_backend.fleet import _entries, _wheel_cache
from fa_backend.resources.runtime_guard import PROVENANCE
from fa_backend.wheel import _wheelfile

NAME = "demo-1.0+cpu-cp311-cp311-linux_x86_64.whl"


def _cache(tmp_path, root):
    wheel = _wheelfile.WheelWriter(tmp_path / NAME, "demo-1.0+cpu.dist-info")
    wheel.add("demo/__init__.py", b"")
    built = wheel.write()
    fingerprint = {"torch": ["2.13.0+cpu"]}
    _wheel_cache.obtain(
        root, fingerprint, NAME, tmp_path / "out", lambda w: None, lambda: built, 600, 15,
        torch_version="2.13.0+cpu",
    )  # fmt: skip
    (entry,) = _entries.all_entries(root)
    return entry


def _flip(entry):
    data = bytearray((entry / NAME).read_bytes())
    data[len(data) // 2] ^= 1
    (entry / NAME).write_bytes(bytes(data))


def _outside(entry):
    (entry.parent.parent / "outside.whl").write_bytes((entry / NAME).read_bytes())
    (entry / _entries.ENTRY).write_text('{"wheel": "../../outside.whl", "sha256": "0"}')


@pytest.mark.parametrize(
    "damage, cause",
    [
        pytest.param(_flip, "not the wheel it stored: its sha256 is", id="C01-byte-flipped"),
        pytest.param(
            lambda e: (e / _entries.ENTRY).unlink(),
            f"incomplete: no {_entries.ENTRY} naming a wheel that is there",
            id="C03-entry-json-missing",
        ),
        pytest.param(
            _outside,
            f"incomplete: no {_entries.ENTRY} naming a wheel that is there",
            id="C05-entry-names-outside",
        ),
        pytest.param(
            lambda e: (e / _entries.FINGERPRINT).unlink(),
            f"incomplete: no readable {_entries.FINGERPRINT}",
            id="C09-fingerprint-missing",
        ),
    ],
)
def test_a_damaged_entry_fails_naming_the_rm_that_clears_it(tmp_path, damage, cause):
    root = tmp_path / "cache"
    entry = _cache(tmp_path, root)
    assert _cache_check.check_entry(entry, None).result == "ok"
    damage(entry)
    row = _cache_check.check_entry(entry, None)
    assert row.result == "FAILED" and row.reason.startswith(cause)
    assert row.reason.endswith(f"remove it (rm -r {entry}): the next build of it stores it again")
    # the fix as written: the entry goes, and the next build stores it whole
    shutil.rmtree(entry)
    assert _cache_check.check_entry(_cache(tmp_path, root), None).result == "ok"


def test_c14_cache_check_of_a_cache_dir_names_its_wheel_cache(tmp_path):
    cache_dir = tmp_path / "fa-shim"
    _cache(tmp_path, cache_dir / "wheels")
    with pytest.raises(FaShimError) as exc:
        _cache_check.main("check", cache_dir, False, {})
    assert exc.value.cause == f"{cache_dir} holds no wheel-cache entry."
    assert exc.value.fix == (
        f"check its wheel cache: python -m fa_backend cache check {cache_dir / 'wheels'}"
    )
    (entry,) = _entries.all_entries(cache_dir / "wheels")  # the one the fix names
    assert _cache_check.check_entry(entry, None).result == "ok"


def test_an_index_link_to_a_deleted_wheel_is_a_failed_row_naming_the_index(tmp_path):
    root, name = tmp_path / "cache", "demo-1.0+cpu-cp311-cp311-linux_x86_64.whl"
    built = tmp_path / name
    with zipfile.ZipFile(built, "w") as z:
        z.writestr("demo/__init__.py", "")
    _wheel_cache.obtain(
        root, {"d": 1}, name, tmp_path / "out", lambda w: None, lambda: built, 600, 15,
        torch_version="2.13.0+cpu",
    )  # fmt: skip
    assert _cache_check.stale_links(root) == []
    view = root / "torch-2.13.0+cpu" / name
    view.unlink()
    (row,) = _cache_check.stale_links(root)
    assert (row.key, row.wheel, row.result) == ("index/torch-2.13.0+cpu/demo", name, "FAILED")
    assert row.reason.startswith(f"the index links {view}, which is gone: pip and uv fail")


def _wheel(path, module: bytes = b"kernels", **prov):
    """A wheel as repack writes one: a module and the provenance (pipeline/_provenance)."""
    writer = _wheelfile.WheelWriter(path, "demo-1.0.dist-info")
    writer.add("demo/k.so", module)
    provenance = {"torch": {"version": "2.11.0"}, "reused_objects": [], **prov}
    writer.add(f"demo-1.0.dist-info/{PROVENANCE}", json.dumps(provenance).encode())
    return writer.write()


def test_a_rebuild_differing_only_in_the_objects_the_cache_gave_is_the_same_wheel(tmp_path):
    """`cache check --rebuild` compiles every kernel, so its provenance names no reused object:
    an entry whose kernels came from the object cache is the same wheel where nothing else
    differs (each object is compared on its own row); any other difference is named."""
    fresh = _wheel(tmp_path / "fresh.whl")
    reused = [{"key": "ab-cd", "source": "k.cu", "built_under": "torch 2.6.0", "host": "n1"}]

    def row(wheel):
        return _cache_check._rebuilt(_cache_check.Row("key"), wheel, sha256_of(wheel), fresh)

    assert row(_wheel(tmp_path / "same.whl")).reason.startswith("rebuilt byte for byte (sha256")
    served = row(_wheel(tmp_path / "served.whl", reused_objects=reused))
    assert (served.result, served.reason) == (
        "ok",
        "rebuilt byte for byte but the provenance's 1 reused kernel objects",
    )
    other_torch = row(_wheel(tmp_path / "t.whl", reused_objects=reused, torch={"version": "2.6"}))
    other_module = row(_wheel(tmp_path / "m.whl", b"planted", reused_objects=reused))
    for bad in (other_torch, other_module):
        assert bad.result == "FAILED" and "not what its fingerprint builds" in bad.reason
    differ = f"members that differ: demo-1.0.dist-info/{PROVENANCE}, demo/k.so"
    assert other_module.reason.endswith(differ), other_module.reason


def test_the_index_of_a_kernel_sets_arch_set_is_read_too(tmp_path):
    """Every view has its index (a tailored set's, an arch set's below it: fleet/_wheel_cache),
    and each one's links are read: a wheel gone from torch-<v>/<set>/sm90/ fails that index."""
    root, name = tmp_path / "cache", "demo-1.0+cu130-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(tmp_path / name, "w") as z:
        prov = {"cuda_archs": ["90"], "kernel_set_name": "hdim128"}
        z.writestr("demo-1.0.dist-info/fa_shim_provenance.json", json.dumps(prov))
    _wheel_cache.obtain(
        root, {"d": 1}, name, tmp_path / "out", lambda w: None, lambda: tmp_path / name, 600,
        15, torch_version="2.11.0+cu130",
    )  # fmt: skip
    assert _cache_check.stale_links(root) == []
    (root / "torch-2.11.0+cu130" / "hdim128" / "sm90" / name).unlink()
    (row,) = _cache_check.stale_links(root)
    assert (row.key, row.wheel) == ("index/torch-2.11.0+cu130/hdim128/sm90/demo", name)
