"""The FlashAttention-3 registry's lines (vendored_patches/fa3/, flavours/fa3/_releases.py): the
tagged v2.8.3 and upstream main at 0251105a, which line `fa3-release` picks for a torch, and
what a release.toml of a branch's commit must say. Pure: no tree, no torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from fa_backend.core._errors import FaShimError
from fa_backend.flavours.fa3 import _releases, _sources
from fa_backend.flavours.fa3._trees import CUTLASS, HOPPER
from fa_backend.sources import _patches

STABLE = "main-0251105a"
COMMIT = "0251105a2fb19d2957484b7f023cd8c115286ced"
PIN = "c85835f7c8f4eecb19bee69d672beb207ad8fa4b009a7ced1a3ca8c017a94997"


def test_the_stable_line_is_pinned_by_commit_and_content():
    line = _releases.release(STABLE)
    assert line.tag is None and line.commit == COMMIT and line.date == "2026-08-15"
    assert line.hopper_pin == PIN
    assert line.cutlass_commit == "7127592069c2fe01b041e174ba4345ef9b279671"
    assert line.stable and line.torch_target == "2.9.0" and line.forward_units == "per-head-dim"
    assert [p.name for p in _patches.read(line.patches)] == [
        "01-no-toolchain-download.patch",
        "02-no-git-submodule.patch",
        "03-no-wheel-download.patch",
        "04-no-readme.patch",
        "05-import-guard.patch",
        "06-headdim-dispatch.patch",
    ]
    # ../shared/fa3's names and GitHub's archive of the commit: by the full commit
    assert _sources.archive_name(line, HOPPER) == f"flash-attention-{COMMIT}-hopper.tar.gz"
    assert _sources.archive_top(line, HOPPER) == f"flash-attention-{COMMIT}"
    assert _sources.download_url(line, HOPPER).endswith(f"/flash-attention/archive/{COMMIT}.tar.gz")
    assert _sources.archive_name(line, CUTLASS) == f"cutlass-{line.cutlass_commit}-include.tar.gz"
    assert line.source_label == "g0251105a"


def test_v2_8_3_is_the_torch_bound_line():
    line = _releases.release("2.8.3")
    assert line.tag == "v2.8.3" and line.source_label == "v2.8.3" and line.ref == "v2.8.3"
    assert not line.stable and line.forward_units == "split" and line.split_aggregates
    assert line.serves("2.6.0") and line.serves("2.14.1+cu130")


@pytest.mark.parametrize(
    "torch, line",
    [
        ("2.11.0+cu130", STABLE),
        ("2.14.1+cu130", STABLE),
        ("2.9.0", STABLE),
        ("2.9.1+cu128", STABLE),
        ("2.8.0+cu128", "2.8.3"),
        ("2.6.0+cu124", "2.8.3"),
        ("2.9.0.dev20250901+cu128", "2.8.3"),  # a nightly before the floor: torch-bound
    ],
)
def test_auto_picks_the_stable_line_from_its_floor_on(torch, line):
    assert _releases.choose("auto", torch).version == line
    assert _releases.choose(" AUTO ", torch).version == line


@pytest.mark.parametrize("wanted", [STABLE, "0251105a", "0251105a2fb19d", COMMIT, "MAIN-0251105A"])
def test_a_line_by_name_or_commit_prefix(wanted):
    assert _releases.choose(wanted, "2.11.0").version == STABLE


@pytest.mark.parametrize("wanted", ["2.8.3", "v2.8.3", "060c9188"])
def test_v2_8_3_by_version_tag_or_commit(wanted):
    assert _releases.choose(wanted, "2.11.0").version == "2.8.3"


def test_an_unknown_line_names_the_known_ones():
    with pytest.raises(FaShimError) as info:
        _releases.choose("main-0251105b", "2.11.0")
    assert "fa3-release = 'main-0251105b' names no FlashAttention-3 line" in info.value.cause
    assert "Did you mean 'main-0251105a'?" in info.value.cause
    assert "auto or one of: 2.8.3, main-0251105a" in info.value.fix
    with pytest.raises(FaShimError, match="names no"):
        _releases.choose("025110", "2.11.0")  # 6 hex digits: too short to be a commit


def _line(root: Path, name: str, **keys: str) -> Path:
    base = {
        "commit": COMMIT,
        "date": "2026-08-15",
        "hopper-tree": PIN,
        "cutlass-commit": "7127592069c2fe01b041e174ba4345ef9b279671",
        "cutlass-tree": PIN,
        "forward-units": "per-head-dim",
    }
    base.update(keys)
    directory = root / name
    directory.mkdir(parents=True)
    text = "".join(f'{k} = "{v}"\n' for k, v in base.items() if v is not None)
    (directory / "release.toml").write_text(text)
    return directory


def test_the_next_commit_is_one_directory_and_becomes_the_default(tmp_path):
    """How the next upstream state is added: one directory, release.toml + patches; the
    newest stable line by date is what auto picks for a torch it serves."""
    _line(tmp_path, "2.8.3", tag="v2.8.3", commit="0" * 40, date="2025-08-14")
    _line(tmp_path, STABLE, **{"torch-abi": "stable", "torch-target": "2.9.0"})
    _line(
        tmp_path,
        "main-1234abcd",
        commit="1234abcd" + "0" * 32,
        date="2026-10-01",
        **{"torch-abi": "stable", "torch-target": "2.10.0"},
    )
    assert _releases.known(tmp_path) == ["2.8.3", STABLE, "main-1234abcd"]
    assert _releases.choose("auto", "2.11.0", tmp_path).version == "main-1234abcd"
    assert _releases.choose("auto", "2.9.1", tmp_path).version == STABLE  # below the new floor
    assert _releases.choose("auto", "2.7.1", tmp_path).version == "2.8.3"


def test_a_branch_commits_directory_must_name_its_commit(tmp_path):
    directory = _line(tmp_path, "main-deadbeef", **{"torch-abi": "stable"})
    with pytest.raises(FaShimError) as info:
        _releases.load(directory)
    assert f"commit = '{COMMIT}' does not start with deadbeef" in info.value.cause
    assert "torch-target goes with torch-abi = 'stable'" in info.value.cause


def test_new_keys_are_checked(tmp_path):
    directory = _line(
        tmp_path,
        "nightly",
        date="2026-13-01",
        **{"forward-units": "per-hdim", "torch-abi": "stable", "torch-target": "2.9"},
    )
    with pytest.raises(FaShimError) as info:
        _releases.load(directory)
    cause = info.value.cause
    assert (
        "forward-units = 'per-hdim' is not aggregate (setup.py's hdimall/hdimdiff units)" in cause
    )
    assert "torch-target = '2.9' is not the oldest torch" in cause
    directory = _line(tmp_path / "b", "nightly", date="2026-13-01")
    with pytest.raises(FaShimError) as info:
        _releases.load(directory)
    assert "date = '2026-13-01' is not a calendar date" in info.value.cause
    assert "neither a tag's version nor <branch>-<the commit's first 8 hex digits>" in (
        info.value.cause
    )


def test_the_lines_share_one_file_per_distinct_patch():
    listed = [p for line in _releases.known() for p in _releases.release(line).patches]
    assert set(listed) == set((_releases.FA3_DIR / "patches").glob("*"))
    assert len(set(listed)) < len(listed)  # 04-no-readme.patch serves both lines


def test_a_line_lists_its_patches_by_file(tmp_path):
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "01-a.2.8.3.patch").write_text("Reason: a\n")
    directory = _line(tmp_path, "2.8.3", tag="v2.8.3")
    with (directory / "release.toml").open("a") as f:
        f.write('patches = ["01-a.2.8.3.patch", "02-b.patch"]\n')
    with pytest.raises(FaShimError) as info:
        _releases.load(directory)
    assert "patches lists '02-b.patch', which is not a file in" in info.value.cause
    (tmp_path / "patches" / "02-b.patch").write_text("Reason: b\n")
    line = _releases.load(directory)
    assert [p.name for p in line.patches] == ["01-a.2.8.3.patch", "02-b.patch"]
