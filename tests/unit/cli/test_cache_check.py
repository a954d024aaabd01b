"""cli/_cache_check in-process, on a real wheel cache made by fleet/_wheel_cache.obtain: the
links of a torch's PEP 503 index to wheels that are gone are rows of their own (issue 54's TC07).
Through the command line, on the sample built by pip: tests/integration/test_cache_trust.py."""

from __future__ import annotations

import json
import zipfile

from fa_backend.cli import _cache_check
from fa_backend.fleet import _wheel_cache


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
