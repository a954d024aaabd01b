"""cli/_cache_check in-process, on a real wheel cache made by fleet/_wheel_cache.obtain: the
links of a torch's PEP 503 index to wheels that are gone are rows of their own (issue 54's TC07).
Through the command line, on the sample built by pip: tests/integration/test_cache_trust.py."""

from __future__ import annotations

import json
import zipfile

from fa_backend.cli import _cache_check
from fa_backend.core._digest import sha256_of
from fa_backend.fleet import _wheel_cache
from fa_backend.resources.runtime_guard import PROVENANCE
from fa_backend.wheel import _wheelfile


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
