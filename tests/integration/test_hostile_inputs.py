"""Mistaken and hostile inputs (issue 44's table), each run for real in a fresh process on the
sample sdist: one error whose first line names the real cause (or, where the input is fine, a
run that succeeds), no traceback, nothing left behind (the output, the scratch under TMPDIR),
and no file of the user's touched. ROWS is the list docs/generate.py counts for the reliability
page (docs/reference/reliability.md): add a row there and a case below together."""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import (
    PY,
    REPO,
    SAMPLE_VERSION,
    clean_env,
    copy_repo,
    pack_bomb,
    pack_sample,
    sample_settings,
)

from fa_backend.core._ownership import LOCK, RECORD

# (id, what the user gives, what fa-shim answers: the start of its error, or "" for a success)
ROWS = [
    (
        "ninja-off-path-prepare",
        "`prepare` with ninja beside the interpreter but not on PATH (a venv not activated)",
        "ninja is installed in",
    ),
    (
        "ninja-off-path-pip",
        "the same, through `pip wheel --no-build-isolation`",
        "ninja is installed in",
    ),
    (
        "re-prepare-over-edits",
        "`prepare` again into its directory after the user added src/my-edit.txt and edited "
        "setup.py",
        "holds files fa-shim did not write or that changed since its last prepare there",
    ),
    ("two-prepares", "two `prepare` runs into one new `--build-dir` at once", ""),
    (
        "killed-re-prepare",
        "a re-prepare killed with SIGKILL mid-way, then `prepare` again into that directory",
        "was made by fa-shim but holds no record of the files it wrote",
    ),
    (
        "doctor-ninja-off-path",
        "`doctor` with ninja beside the interpreter but not on PATH",
        "error: ninja is installed in",
    ),
    ("cxx-missing", "`CXX=/nonexistent/g++`", "the host C++ compiler `/nonexistent/g++`"),
    ("cc-missing", "`CC=/nonexistent/gcc`", "the host C compiler `/nonexistent/gcc`"),
    (
        "verify-foreign-module",
        "`verify` of numpy's module renamed flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so",
        "FAIL  symbols       the module takes no symbol from torch and embeds no CUDA device code",
    ),
    (
        "empty-archs",
        "`-C cuda-archs=` (an unset $ARCH)",
        "setting 'cuda-archs' from config_settings (-C) is empty",
    ),
    (
        "empty-archs-env",
        "`FA_SHIM_CUDA_ARCHS=`",
        "setting 'cuda-archs' from environment variable FA_SHIM_CUDA_ARCHS is empty",
    ),
    ("empty-int", "`-C max-jobs=`", "setting 'max-jobs' from config_settings (-C) is empty"),
    ("empty-bool", "`-C offline=`", "setting 'offline' from config_settings (-C) is empty"),
    (
        "empty-str",
        "`-C compiler-cache=`",
        "setting 'compiler-cache' from config_settings (-C) is empty",
    ),
    ("empty-path", "`-C sdist=`", "setting 'sdist' from config_settings (-C) is empty"),
    (
        "empty-version",
        "`-C flash-attn-version=`",
        "setting 'flash-attn-version' from config_settings (-C) is empty",
    ),
    (
        "empty-seconds",
        "`-C wheel-cache-heartbeat=`",
        "setting 'wheel-cache-heartbeat' from config_settings (-C) is empty",
    ),
    ("empty-list", "`-C head-dims=`", "setting 'head-dims' from config_settings (-C) is empty"),
    (
        "torch-abi-typo",
        "`-C torch-abi=stabel`",
        "setting torch-abi is 'stabel', expected one of torch, stable (did you mean 'stable'?)",
    ),
    (
        "torch-abi-no-stable-line",
        "`-C torch-abi=stable` for a release fa-shim has no stable-ABI binding of",
        "has no binding on torch's stable ABI in fa-shim",
    ),
    (
        "torch-abi-cpu-torch",
        "`-C torch-abi=stable` for 2.8.3.post2 beside a CPU-only torch",
        "has no CUDA: -C torch-abi=stable builds flash-attn's CUDA kernels",
    ),
    ("sdist-is-a-directory", "`-C sdist=` a directory", "(setting sdist) is a directory"),
    (
        "directory-named-like-sdist",
        "a directory named like the sdist in `sdist-dir`",
        "is a directory named like the sdist",
    ),
    (
        "not-gzip-sdist",
        "a user's non-gzip file named as the sdist",
        "is not a readable sdist",
    ),
    (
        "pin-off-by-one-digit",
        "a `release.toml` sha256 pin off by one digit, the genuine sdist",
        "the sha256 pinned in",
    ),
    (
        "prepare-outside-checkout",
        "`prepare` run outside the checkout (no [tool.fa-shim] there)",
        "no flash-attn version is configured",
    ),
    (
        "gzip-bomb",
        "an sdist of 18.8 MB holding a 4 GiB zero member, whose gzip trailer reads 16 kB (the "
        "size modulo 4 GiB); on a 200 MB disk too (test_full_disk.py)",
        "holds an unsafe archive member flash_attn-0.1.0/zeros.bin",
    ),
    (
        "wheel-cache-dir-users-directory",
        "`pip wheel … -C wheel-cache-dir=DIR`, DIR a directory of the user's holding their own "
        "install.py",
        "(setting wheel-cache-dir) holds files fa-shim did not make (install.py)",
    ),
    (
        "wheel-cache-dir-dot-in-a-project",
        "`FA_SHIM_WHEEL_CACHE_DIR=. pip wheel /path/to/fa-shim …` run in the user's project",
        "(setting wheel-cache-dir) holds files fa-shim did not make (install.py, pyproject.toml)",
    ),
    (
        "version-not-its-own",
        "an unpinned sdist whose PKG-INFO says 0.1.0, built as 0.2.0",
        "but its PKG-INFO says 0.1.0",
    ),
]


def _digests(*roots: Path, skip: str = "\0") -> dict[str, str]:
    """Every file under roots, by content: what 'no file of the user's touched' compares (but
    names starting with `skip`)."""
    found = {}
    for root in roots:
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if path.is_file() and not path.name.startswith(skip):
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _path_without_ninja(tmp_path: Path) -> str:
    """This PATH with every ninja taken out: each directory holding one is replaced by a
    directory of links to its other entries (g++, as, ld still found where they were)."""
    parts = []
    for i, directory in enumerate(os.environ["PATH"].split(os.pathsep)):
        if not os.path.isdir(directory) or not os.path.exists(os.path.join(directory, "ninja")):
            parts.append(directory)
            continue
        mirror = tmp_path / "path" / str(i)
        mirror.mkdir(parents=True)
        for entry in os.scandir(directory):
            if entry.name != "ninja":
                (mirror / entry.name).symlink_to(entry.path)
        parts.append(str(mirror))
    return os.pathsep.join(parts)


class Case:
    """One row: the command, where it runs, and what must stay as it was."""

    def __init__(self, tmp_path: Path, sdists: Path, cache: Path) -> None:
        self.tmp = tmp_path
        self.out = tmp_path / "out"  # the build dir or wheel dir: empty or absent after a failure
        self.cwd = REPO
        self.env = clean_env(
            TMPDIR=str(tmp_path / "tmp"),
            XDG_CACHE_HOME=str(cache),  # the rows' one torch probe
            FA_SHIM_COMPILER_CACHE="none",
        )
        self.settings = sample_settings(sdists)
        self.user: list[Path] = [sdists]  # files of the user's, compared byte for byte
        self.argv: list = []
        (tmp_path / "tmp").mkdir()

    def prepare(self, *settings: str) -> None:
        self.argv = [PY, "-m", "fa_backend", "prepare", "--build-dir", self.out, *settings]

    def run(self, argv=None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(a) for a in argv or self.argv],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )


def _sample_sdists(tmp_path: Path) -> Path:
    """A user's sdist-dir of their own, holding the sample."""
    pack_sample(tmp_path / "sdists")
    return tmp_path / "sdists"


def _set_up(row: str, case: Case, tmp_path: Path) -> None:
    sdists = case.user[0]
    if row == "ninja-off-path-prepare":
        case.env["PATH"] = _path_without_ninja(tmp_path)
        case.prepare(*case.settings)
    elif row == "ninja-off-path-pip":
        case.env["PATH"] = _path_without_ninja(tmp_path)
        case.env["PIP_NO_CACHE_DIR"] = "1"
        case.argv = [PY, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
        case.argv += ["-w", case.out, copy_repo(tmp_path / "fa-shim"), *case.settings]
    elif row == "re-prepare-over-edits":
        case.prepare(*case.settings)
        first = case.run()
        assert first.returncode == 0, first.stderr
        tree = case.out / "src" / f"flash_attn-{SAMPLE_VERSION}"
        (tree / "my-edit.txt").write_text("mine\n")
        with (tree / "setup.py").open("a") as f:
            f.write("# my change\n")
        case.user += [tree / "my-edit.txt", tree / "setup.py"]
    elif row == "two-prepares":
        case.prepare(*case.settings)
    elif row == "killed-re-prepare":
        case.prepare(*case.settings)
        _killed(case)
    elif row == "doctor-ninja-off-path":
        case.env["PATH"] = _path_without_ninja(tmp_path)
        case.argv = [PY, "-m", "fa_backend", "doctor"]
    elif row in ("cxx-missing", "cc-missing"):
        variable, program = ("CXX", "g++") if row == "cxx-missing" else ("CC", "gcc")
        case.env[variable] = f"/nonexistent/{program}"
        case.prepare(*case.settings)
    elif row == "verify-foreign-module":
        import numpy

        (numpy_module,) = Path(numpy.__file__).parent.glob("_core/_multiarray_umath.*.so")
        suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
        module = tmp_path / "mine" / f"flash_attn_2_cuda{suffix}"
        module.parent.mkdir()
        shutil.copyfile(numpy_module, module)
        case.user.append(module)
        case.argv = [PY, "-m", "fa_backend", "verify", module]
    elif row.startswith("empty-"):
        key = {
            "empty-archs": "cuda-archs",
            "empty-int": "max-jobs",
            "empty-bool": "offline",
            "empty-str": "compiler-cache",
            "empty-path": "sdist",
            "empty-version": "flash-attn-version",
            "empty-seconds": "wheel-cache-heartbeat",
            "empty-list": "head-dims",
        }.get(row)
        if row == "empty-archs-env":
            case.env["FA_SHIM_CUDA_ARCHS"] = ""
            case.prepare(*case.settings)
        else:
            case.prepare(*case.settings, "-C", f"{key}=")
    elif row == "torch-abi-typo":
        case.prepare(*case.settings, "-C", "torch-abi=stabel")
    elif row == "torch-abi-no-stable-line":
        case.prepare(*case.settings, "-C", "torch-abi=stable")
    elif row == "torch-abi-cpu-torch":  # refused before its sdist is looked for
        case.prepare("-C", "flash-attn-version=2.8.3.post2", "-C", "torch-abi=stable")
    elif row == "sdist-is-a-directory":
        case.prepare(*case.settings, "-C", f"sdist={sdists}")
    elif row == "directory-named-like-sdist":
        mine = tmp_path / "mine-sdists"
        (mine / f"flash_attn-{SAMPLE_VERSION}.tar.gz").mkdir(parents=True)
        (mine / f"flash_attn-{SAMPLE_VERSION}.tar.gz" / "notes.txt").write_text("mine\n")
        case.user.append(mine)
        case.prepare(*sample_settings(mine))
    elif row == "not-gzip-sdist":
        (sdists / f"flash_attn-{SAMPLE_VERSION}.tar.gz").write_text("my notes, not a tarball\n")
        case.prepare(*case.settings)
    elif row == "pin-off-by-one-digit":
        # the sample pinned in a copy's registry, its sha256 one digit off
        repo = copy_repo(tmp_path / "fa-shim")
        sdist = sdists / f"flash_attn-{SAMPLE_VERSION}.tar.gz"
        digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
        wrong = digest[:-1] + ("0" if digest[-1] != "0" else "1")
        pin = repo / "vendored_patches" / SAMPLE_VERSION / "release.toml"
        pin.parent.mkdir()
        pin.write_text(f'sdist = "{sdist.name}"\nsha256 = "{wrong}"\narchs = "fixed-80-90"\n')
        case.cwd = repo
        case.argv = [PY, "-m", "fa_backend", "prepare", "--build-dir", case.out]
        case.argv += ["-C", f"flash-attn-version={SAMPLE_VERSION}", "-C", f"sdist-dir={sdists}"]
        case.pin = pin  # the message must name it
    elif row == "prepare-outside-checkout":
        case.cwd = tmp_path / "elsewhere"
        case.cwd.mkdir()
        case.env["PYTHONPATH"] = str(REPO)
        case.prepare()
    elif row == "gzip-bomb":  # refused at its header: nothing extracted, whatever the disk
        case.user.append(pack_bomb(tmp_path / "bomb"))
        case.prepare(*sample_settings(tmp_path / "bomb"))
    elif row.startswith("wheel-cache-dir-"):  # never a file of the user's replaced (MX12)
        mine = tmp_path / "mine"
        mine.mkdir()
        (mine / "install.py").write_text("print('my own installer')\n")
        settings = case.settings
        if row.endswith("dot-in-a-project"):
            (mine / "pyproject.toml").write_text('[project]\nname = "mine"\n')
            case.cwd, case.env["FA_SHIM_WHEEL_CACHE_DIR"] = mine, "."
            case.env["PWD"] = str(mine)  # as the user's shell sets it (pip moves the cwd)
        else:
            settings = [*settings, "-C", f"wheel-cache-dir={mine}"]
        case.user.append(mine)
        case.mine = mine  # nothing added to it either
        case.argv = [PY, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", case.out]
        case.argv += [copy_repo(tmp_path / "fa-shim"), *settings]
    elif row == "version-not-its-own":
        (sdists / f"flash_attn-{SAMPLE_VERSION}.tar.gz").rename(sdists / "flash_attn-0.2.0.tar.gz")
        case.prepare(
            "-C",
            "flash-attn-version=0.2.0",
            "-C",
            f"sdist-dir={sdists}",
            "-C",
            "allow-unknown-version=true",
        )
    else:
        raise AssertionError(row)


def _killed(case: Case) -> None:
    """A prepare, then a re-prepare SIGKILLed once it has laid its tree out (its compiler probe
    hangs): the half tree carries no record of a prepared one, and its lock is a dead run's."""
    first = case.run()
    assert first.returncode == 0, first.stderr
    started = case.tmp / "probe-started"
    hang = case.tmp / "hang-c++"
    hang.write_text(
        f'#!/bin/sh\ncase "$*" in *" -E "*) echo $$ > {started}; exec sleep 600;; esac\n'
        'exec g++ "$@"\n'
    )
    hang.chmod(0o755)
    proc = subprocess.Popen(
        [str(a) for a in case.argv],
        cwd=case.cwd,
        env={**case.env, "CXX": str(hang)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120

    def pid() -> str:  # written by the stand-in once it runs
        return started.read_text().strip() if started.exists() else ""

    while not pid() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid(), "the re-prepare never reached its compiler probe"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # the probe runs in a session of its own (core/_subprocess), which a SIGKILL of fa-shim
    # cannot end: this test's hanging stand-in goes by its pid
    os.kill(int(pid()), signal.SIGKILL)
    assert not (case.out / RECORD).exists()  # no half tree marked as prepared


def _two_at_once(case: Case) -> None:
    """Both prepares succeed, one after the other (the lock), into one whole tree."""
    procs = [
        subprocess.Popen(
            [str(a) for a in case.argv],
            cwd=case.cwd,
            env=case.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert "Traceback" not in err and "File exists" not in err, err
    assert (case.out / RECORD).is_file()
    assert (case.out / "src" / f"flash_attn-{SAMPLE_VERSION}" / "setup.py").is_file()


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hostile-xdg")


@pytest.mark.parametrize("row", [r[0] for r in ROWS])
def test_a_hostile_input_gets_one_true_error_and_leaves_nothing(row, tmp_path, cache):
    _, _, expected = next(r for r in ROWS if r[0] == row)
    case = Case(tmp_path, _sample_sdists(tmp_path), cache)
    _set_up(row, case, tmp_path)
    before = _digests(*case.user)
    before_out = _digests(case.out, skip=LOCK) if case.out.exists() else {}
    before_mine = [p.name for p in case.mine.iterdir()] if hasattr(case, "mine") else []
    if not expected:
        _two_at_once(case)
    else:
        proc = case.run()
        text = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "Traceback" not in text, text
        if row == "verify-foreign-module":  # a report, not an error: its failed check says why
            assert expected in proc.stdout and "_multiarray_umath" in proc.stdout, text
            assert "result: FAILED" in proc.stdout
        elif row.startswith("doctor-"):  # a report too: its problem says why, with the fix
            report = " ".join(proc.stdout.split())
            assert expected in report and "not on PATH" in report, text
            assert "pip install ninja" not in report, text
        else:
            assert text.count("fa-shim: error:") == 1, text
            first = text[text.index("fa-shim: error:") :].splitlines()[0]
            assert expected in first, text
            fix = text[text.index("fa-shim: fix:") :]
            assert "delete" not in fix.split("\n\n")[0], text  # never a user's file
            if hasattr(case, "pin"):
                assert str(case.pin) in first and "the sdist is fine" in fix, text
            if hasattr(case, "mine"):
                assert f"{case.mine} (setting wheel-cache-dir)" in first, text
                assert sorted(p.name for p in case.mine.iterdir()) == sorted(before_mine), text
            if row == "prepare-outside-checkout":
                assert "FA_SHIM_FLASH_ATTN_VERSION=2.8.3.post2" in fix, text
        if row == "killed-re-prepare":  # the dead run's lock was taken over, and released
            assert "took over the --build-dir lock" in text, text
        if row in ("re-prepare-over-edits", "killed-re-prepare"):  # its tree stays as it was
            assert _digests(case.out, skip=LOCK) == before_out
        elif case.out.exists():
            assert list(case.out.iterdir()) == [], list(case.out.iterdir())
    assert _digests(*case.user) == before  # data lost: none
    assert list((tmp_path / "tmp").iterdir()) == []  # leftovers: none
