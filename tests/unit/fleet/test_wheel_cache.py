"""The wheel cache (fa_backend/fleet/_wheel_cache.py) in-process, on real files: a cache that
cannot keep a freshly built wheel is a warning, never a lost build. Its sweep of killed writers'
leftovers: test_wheel_cache_partials.py; shared by users and builds in real processes:
tests/integration/test_shared_cache.py, tests/integration/test_build_speed.py."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.fleet import _wheel_cache


def test_a_cache_that_cannot_keep_the_wheel_is_a_warning(tmp_path, capfd):
    """After a successful build the entry cannot be made (here: a file sits where its directory
    goes, a real OSError even for root): the user still gets the wheel, with a warning."""
    root, out = tmp_path / "cache", tmp_path / "out"
    fingerprint = {"demo": 2}
    entry = root / _wheel_cache.key(fingerprint)
    built = tmp_path / "demo-1.0-py3-none-any.whl"

    def build() -> Path:
        with zipfile.ZipFile(built, "w") as z:
            z.writestr("demo/__init__.py", "")
        entry.write_text("in the way")  # the cache breaks while the compile runs
        return built

    wheel = _wheel_cache.obtain(root, fingerprint, built.name, out, lambda w: None, build, 600, 15)
    assert wheel == out / built.name and wheel.read_bytes() == built.read_bytes()
    err = capfd.readouterr().err
    assert f"the wheel cache {root} could not keep this wheel" in err
    assert "the wheel itself is built" in err and "Traceback" not in err


def test_each_wheel_is_linked_into_its_torchs_directory(tmp_path, capfd):
    """A build and a hit both leave the wheel in torch-<torch.__version__>/ as a hard link to the
    entry (no second copy), and log the line a teammate installs it with; an entry kept before
    these directories existed gets its link on its next hit."""
    root, out = tmp_path / "cache", tmp_path / "out"
    built = tmp_path / "demo-1.0+cu130torch2.11-cp311-cp311-linux_x86_64.whl"

    def build() -> Path:
        with zipfile.ZipFile(built, "w") as z:
            z.writestr("demo/__init__.py", "")
        return built

    def obtain(torch_version):
        return _wheel_cache.obtain(
            root, {"d": 1}, built.name, out, lambda w: None, build, 600, 15,
            torch_version=torch_version,
        )  # fmt: skip

    obtain(None)  # an entry made without the torch's directory (an older fa-shim)
    assert not list(root.glob("torch-*"))
    obtain("2.11.0+cu130")  # a hit
    (linked,) = (root / "torch-2.11.0+cu130").iterdir()
    entry = root / _wheel_cache.key({"d": 1}) / built.name
    assert linked.name == built.name and linked.stat().st_ino == entry.stat().st_ino
    err = capfd.readouterr().err
    line = _wheel_cache.install_line(root, "demo")
    assert f"teammates with torch 2.11.0+cu130 install it with: {line}" in err
    assert line == f"python {root / 'install.py'} demo" and (root / "install.py").is_file()


def test_install_py_names_each_distributions_own_project(tmp_path):
    """The install.py fa-shim keeps names, for a miss, each flavour's project in this checkout:
    `install.py flash-attn-3` builds flash-attn-3/, not the root (I3), and nothing else changes."""
    from fa_backend.flavours import _registry
    from fa_backend.resources import INSTALLER, team_install

    _wheel_cache.keep_installer(tmp_path)
    text = (tmp_path / "install.py").read_text()
    scope: dict = {"__file__": str(tmp_path / "install.py"), "__name__": "install"}
    exec(compile(text, "install.py", "exec"), scope)
    wanted = {team_install.normal(f.names.dist): str(f.project_dir()) for f in _registry.every()}
    assert scope["PROJECTS"] == wanted and len(set(wanted.values())) == len(wanted) >= 2
    assert [a for a in text.splitlines() if a.startswith("PROJECTS")] == [
        f"PROJECTS: dict = {wanted!r}"
    ]
    assert len(text.splitlines()) == len(INSTALLER.read_text().splitlines())


def test_a_hit_leaves_nothing_behind_in_the_cache_root(tmp_path):
    """The torch directory's link already there (every hit after the first build): linking it
    again renames a link onto a link of the same file, which rename(2) does as a no-op that
    succeeds; the temporary name must not stay behind in the cache root."""
    root, out = tmp_path / "cache", tmp_path / "out"
    built = tmp_path / "demo-1.0+cpu-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(built, "w") as z:
        z.writestr("demo/__init__.py", "")
    for _ in range(3):  # a build, then two hits
        _wheel_cache.obtain(
            root, {"d": 1}, built.name, out, lambda w: None, lambda: built, 600, 15,
            torch_version="2.13.0+cpu",
        )  # fmt: skip
    top = sorted(p.name for p in root.iterdir())
    assert top == sorted([".locks", _wheel_cache.key({"d": 1}), "index", "install.py",
                          "torch-2.13.0+cpu"]), top  # fmt: skip


def _wheel(path: Path, archs: list[str], kernel_set: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("demo/__init__.py", "")
        prov = {"cuda_archs": archs, "kernel_set_name": kernel_set}
        z.writestr("demo-1.0.dist-info/fa_shim_provenance.json", json.dumps(prov))
    return path


def test_views_keep_each_arch_set_and_kernel_set_apart(tmp_path, capfd):
    """Builds for sm_80 then sm_90 (one file name: the archs are not in it) and a tailored set, for
    one torch: the torch's directory keeps the sm_80 file (one warning names where the sm_90 one
    is), each arch set's directory below it (sm80/, sm90/) holds its own build, with an index of
    its own, so neither is lost; the tailored set sits in a directory of its own, with its index
    (an unpinned install from the torch's directory or index takes the full set), and the top
    level holds no wheel (a frontend pointed there would rank another torch's higher)."""
    root, name = tmp_path / "cache", "demo-1.0+cu130torch2.11-cp311-cp311-linux_x86_64.whl"
    tailored = name.replace("2.11-", "2.11.hdim128-")
    builds = [
        ({"a": 1}, "80", "hdim128", tailored),
        ({"a": 80}, "80", "full", name),
        ({"a": 90}, "90", "full", name),
    ]  # fmt: skip (the tailored first: no torch dir)
    for n, (fingerprint, arch, kernel_set, wheel_name) in enumerate(builds):
        (tmp_path / str(n)).mkdir()
        wheel = _wheel(tmp_path / str(n) / wheel_name, [arch], kernel_set)
        _wheel_cache.obtain(
            root, fingerprint, wheel_name, tmp_path / "out", lambda w: None, lambda w=wheel: w,
            600, 15, torch_version="2.11.0+cu130",
        )  # fmt: skip
    view = root / "torch-2.11.0+cu130"
    assert sorted(p.name for p in view.iterdir()) == sorted([name, "hdim128", "sm80", "sm90"])
    entry = {a: root / _wheel_cache.key({"a": a}) / n for a, n in ((80, name), (90, name))}
    entry[1] = root / _wheel_cache.key({"a": 1}) / tailored
    for path, built in [("", 80), ("sm80/", 80), ("sm90/", 90), ("hdim128/sm80/", 1)]:
        linked = view / path / (tailored if built == 1 else name)
        assert linked.stat().st_ino == entry[built].stat().st_ino, path
    assert sorted(p.name for p in (view / "hdim128").iterdir()) == [tailored, "sm80"]
    assert not list(root.glob("*.whl"))
    err = capfd.readouterr().err
    assert (
        f"{view / name} is the build for sm_80, and stays: this one (sm_90) is in {view / 'sm90'} "
        f"(index: {root / 'index' / view.name / 'sm90'}), and `python {root / 'install.py'}`"
    ) in err
    index = _wheel_cache.index_dir(root, "torch-2.11.0+cu130")
    assert 'href="demo/"' in (index / "index.html").read_text()
    for path, built in [("", 80), ("sm90", 90), ("hdim128", 1), ("hdim128/sm80", 1)]:
        page = index / path / "demo" / "index.html"  # each view's own file, its entry's hash
        ((href, digest),) = re.findall(r'href="([^"#]+)#sha256=(\w+)"', page.read_text())
        assert Path(page.parent, unquote(href)).samefile(entry[built])
        assert digest == hashlib.sha256(entry[built].read_bytes()).hexdigest()


def test_the_torchs_view_and_index_keep_the_build_whose_archs_cover_the_others(tmp_path, capfd):
    """Arch-complete: builds of one name for sm_80, then sm_90 (disjoint: the sm_80 file stays,
    with the warning), then sm_80,sm_90: the last covers both, so the torch's directory and its
    index serve it (its entry's inode and hash); a later sm_90-only build does not replace it."""
    root, name = tmp_path / "cache", "demo-1.0+cu130torch2.11-cp311-cp311-linux_x86_64.whl"
    for n, archs in enumerate((["80"], ["90"], ["80", "90"], ["90"])):
        (tmp_path / str(n)).mkdir()
        wheel = _wheel(tmp_path / str(n) / name, archs, "full")
        _wheel_cache.obtain(
            root, {"archs": archs, "n": n}, name, tmp_path / "out", lambda w: None,
            lambda w=wheel: w, 600, 15, torch_version="2.11.0+cu130",
        )  # fmt: skip
    both = root / _wheel_cache.key({"archs": ["80", "90"], "n": 2}) / name
    view = root / "torch-2.11.0+cu130"
    assert (view / name).stat().st_ino == both.stat().st_ino
    page = (_wheel_cache.index_dir(root, "torch-2.11.0+cu130") / "demo" / "index.html").read_text()
    assert f"#sha256={hashlib.sha256(both.read_bytes()).hexdigest()}" in page
    assert page.count("<a href") == 1
    err = capfd.readouterr().err
    assert f"{view / name} is the build for sm_80, and stays: this one (sm_90)" in err
    assert f"{view / name} is the build for sm_80,sm_90, and stays: this one (sm_90)" in err


def test_a_stable_abi_wheel_is_viewed_for_every_torch_it_serves(tmp_path, capfd):
    """A module on torch's stable ABI (its provenance names the floor) built under torch 2.14.1
    serves every torch >= 2.10 of CUDA 13: its view and index are named for that, never for the
    torch that built it, and the log says whom it serves."""
    root, name = tmp_path / "cache", "demo-1.0+cu13.torch2.10plus-cp310-abi3-linux_x86_64.whl"
    (tmp_path / "b").mkdir()
    with zipfile.ZipFile(tmp_path / "b" / name, "w") as z:
        prov = {"kernel_set_name": "full", "torch": {"stable_abi": "2.10.0", "cuda": "13.0"}}
        z.writestr("demo-1.0.dist-info/fa_shim_provenance.json", json.dumps(prov))
    _wheel_cache.obtain(
        root, {"s": 1}, name, tmp_path / "out", lambda w: None, lambda: tmp_path / "b" / name,
        600, 15, torch_version="2.14.1+cu130",
    )  # fmt: skip
    assert not list(root.glob("torch-*"))
    assert [p.name for p in (root / "stable-cu13-torch2.10plus").iterdir()] == [name]
    page = _wheel_cache.index_dir(root, "stable-cu13-torch2.10plus") / "demo" / "index.html"
    assert f"../../../stable-cu13-torch2.10plus/{quote(name)}#sha256=" in page.read_text()
    err = capfd.readouterr().err
    assert "teammates with torch >= 2.10.0 of CUDA 13 install it with: python " in err


@pytest.mark.parametrize("damage", ["link-to-a-users-file", "truncated-copy"])
def test_a_cpu_torchs_view_file_that_is_no_wheel_of_ours_is_replaced(tmp_path, capfd, damage):
    """Issue 54's C07 and TC14: a CPU torch's wheel records no GPU archs ([]); a view file whose
    provenance does not read (None) is not a build for other GPUs, so the next build or hit puts
    the entry's link back, as for a CUDA torch (TC15); a user's file it linked to is untouched."""
    root, name = tmp_path / "cache", "demo-1.0+cpu-cp311-cp311-linux_x86_64.whl"
    (tmp_path / "built").mkdir()
    wheel = _wheel(tmp_path / "built" / name, [], "full")

    def obtain() -> None:
        _wheel_cache.obtain(
            root, {"cpu": 1}, name, tmp_path / "out", lambda w: None, lambda: wheel, 600, 15,
            torch_version="2.13.0+cpu",
        )  # fmt: skip

    obtain()
    view, entry = root / "torch-2.13.0+cpu" / name, root / _wheel_cache.key({"cpu": 1}) / name
    view.unlink()
    mine = tmp_path / "mine.whl"
    mine.write_bytes(b"the user's own file\n")
    if damage == "link-to-a-users-file":
        view.symlink_to(mine)
    else:
        view.write_bytes(entry.read_bytes()[:100])
    obtain()  # a hit
    assert not view.is_symlink() and view.stat().st_ino == entry.stat().st_ino
    assert mine.read_bytes() == b"the user's own file\n"
    assert "and stays" not in capfd.readouterr().err


def test_a_root_holding_a_users_files_is_refused_and_one_fa_shim_filled_is_taken(tmp_path):
    """Issue 54's MX12: check_root runs before a build writes into the root; what obtain made
    (entries, views, index, locks, install.py) passes; a user's own install.py, or any file of
    theirs, is refused, byte for byte as it was."""
    root = tmp_path / "cache"
    built = tmp_path / "demo-1.0+cpu-cp311-cp311-linux_x86_64.whl"
    _wheel(built, [], "full")
    _wheel_cache.obtain(
        root, {"d": 1}, built.name, tmp_path / "out", lambda w: None, lambda: built, 600, 15,
        torch_version="2.13.0+cpu",
    )  # fmt: skip
    (root / "objects").mkdir()
    (root / ".fa-shim-0123456789ab.part").write_bytes(b"")
    _wheel(root / built.name, [], "full")  # fa-shim 0.5.0's flat copy at the top level
    _wheel_cache.check_root(root)  # fa-shim's own: taken
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "numpy-2.0-py3-none-any.whl").write_bytes(b"not fa-shim's")
    with pytest.raises(FaShimError, match=r"did not make \(numpy-2.0-py3-none-any.whl\)"):
        _wheel_cache.check_root(tmp_path / "other")
    _wheel_cache.check_root(tmp_path / "new")
    (tmp_path / "mine").mkdir()
    for directory in (root, tmp_path / "mine"):
        (directory / _wheel_cache.INSTALL_PY).write_text("print('my own installer')\n")
        with pytest.raises(FaShimError, match=r"did not make \(install.py\)"):
            _wheel_cache.check_root(directory)
        assert (directory / "install.py").read_text() == "print('my own installer')\n"
