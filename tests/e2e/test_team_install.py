"""A teammate installs from the team's wheel cache with the install command fa-shim keeps there
(`python /shared/fa/install.py`: pip 23.2, uv and the current pip; another torch's wheel, a miss
and a tampered wheel in torch 2.11's venv), and with the --find-links line docs/guides/fleet.md
gives for their frontend, unpinned, with the package index reachable (where upstream's flash-attn
2.8.3.post2 sdist sorts above any wheel of an older release, and a wheel built for another torch
sorts above theirs): they get the wheel built for their own torch, Python and CUDA; upstream's
setup.py never runs; torch never changes.

The cache holds the sample built against two torches under two Pythons: this machine's CPU
torch 2.13 and the session's CUDA 13.0 torch 2.11, both under this Python, and torch 2.11 under
a second Python (conftest.SECOND_MINOR). pip and uv install for real into a venv with torch 2.13
inside it (uv looks at nothing outside the venv), and resolve (--dry-run) in the torch 2.11
venvs, which no test installs into. PyPI's CUDA torch 2.13.0 (issue 55's N5), pointed at the
CPU torch's directory, gets the resolver's error."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib
from conftest import (
    HOST_LABEL,
    PY,
    REPO,
    SAMPLE_VERSION,
    SECOND_MINOR,
    T211_LABEL,
    UV_CACHE,
    pip_wheel_cmd,
    run,
    run_sample,
    sample_settings,
    uv_venv,
)
from packaging.utils import canonicalize_name
from packaging.version import Version

pytestmark = pytest.mark.slow

FLEET = REPO / "docs" / "guides" / "fleet.md"
DOCS_ROOT = "/shared/fa"  # the cache the guide's lines name
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"  # this Python's, and the second's
SECOND_TAG = "cp" + SECOND_MINOR.replace(".", "")


def teammate_line(frontend: str) -> str:
    """The guide's line for this frontend ("pip" or "uv"), verbatim."""
    start = {"pip": "pip install --only-binary ", "uv": "uv pip install --only-binary "}
    lines = [ln for ln in FLEET.read_text().splitlines() if ln.startswith(start[frontend])]
    assert len(lines) == 1, f"{FLEET} should give one teammate line for {frontend}: {lines}"
    assert DOCS_ROOT in lines[0]
    return lines[0]


def in_venv(line: str, root: Path, *extra: str) -> list[str]:
    """The line as bash runs it in the activated venv of `python`, the cache at `root`."""
    return ["bash", "-c", " ".join([line.replace(DOCS_ROOT, str(root)), *extra])]


def venv_env(python: Path, uv_cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FA_SHIM_", "PYTHON"))}
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"  # `source venv/bin/activate`
    env["VIRTUAL_ENV"] = str(python.parent.parent)
    env["UV_CACHE_DIR"] = str(uv_cache)
    return env


@pytest.fixture(scope="module")
def team_cache(tmp_path_factory, sample_sdist_dir, torch211_python, torch211_second_python) -> Path:
    """One wheel cache with the sample built against torch 2.13 (CPU) and torch 2.11 (cu130),
    and against torch 2.11 under the second Python."""
    tmp = tmp_path_factory.mktemp("team")
    root = tmp / "fa"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FA_SHIM_")}
    env["XDG_CACHE_HOME"] = str(tmp / "xdg")
    for python in (PY, torch211_python, torch211_second_python):
        proc = run(
            pip_wheel_cmd(
                python, tmp / "out", *sample_settings(sample_sdist_dir),
                "-C", f"wheel-cache-dir={root}", "-v",
            ),
            env=env,
        )  # fmt: skip
        assert "teammates with torch" in proc.stderr  # the build says the line to use
    return root


@pytest.fixture(scope="module")
def t213(tmp_path_factory) -> Path:
    """A teammate's venv with this machine's torch 2.13.0+cpu and pip 23.2 (as `python -m venv`
    gives it on 3.11); every test leaves it without flash-attn."""
    torch = run([PY, "-c", "import importlib.metadata as m; print(m.version('torch'))"])
    return uv_venv(tmp_path_factory.mktemp("t213") / "venv", [f"torch=={torch.stdout.strip()}"])


def install_py(python: Path, root: Path, *args: str, env: dict, check: bool = True):
    return run([python, root / "install.py", *args], env=env, check=check)


def entry_of(root: Path, label: str, tag: str = TAG) -> Path:
    """The entry (its entry.json) of the sample built for torch `label` under Python `tag`."""
    (entry,) = [
        e
        for e in root.glob("*/entry.json")
        if label in e.read_text() and f"-{tag}-{tag}-" in json.loads(e.read_text())["wheel"]
    ]
    return entry


def direct_reference(entry: Path) -> str:
    """What install.py installs of an entry (its entry.json): the entry's own file, its hash in
    the URL, which the installer checks and records (direct_url.json)."""
    record = json.loads(entry.read_text())
    url = (entry.parent / record["wheel"]).as_uri()
    return f"{record['wheel'].split('-')[0].lower()} @ {url}#sha256={record['sha256']}"


def test_the_install_command_installs_the_wheel_of_the_installed_torch(team_cache, t213, uv_cache):
    """`python /shared/fa/install.py`, with pip 23.2, then uv, then the current pip: the wheel of
    torch 2.13.0+cpu (not 2.11's, which a frontend would rank higher), torch untouched."""
    requirements = run([PY, "-m", "fa_backend", "cache", "requirements", team_cache], cwd=REPO)
    (line,) = requirements.stdout.splitlines()  # this environment's (torch 2.13) only
    assert line.startswith(f"flash-attn=={Version(f'{SAMPLE_VERSION}+{HOST_LABEL}')} --hash=")
    env = venv_env(t213, uv_cache)
    freeze = set(run(["uv", "pip", "freeze", "--python", t213], env=env).stdout.splitlines())
    for how in ([], ["--uv"], "current pip"):
        if how == "current pip":  # the newest pip the index has, then pip again
            run(["uv", "pip", "install", "-q", "--python", t213, "-U", "pip"], env=env)
            how = []
        proc = install_py(t213, team_cache, *how, env=env)
        assert f"installed flash-attn {SAMPLE_VERSION}+{HOST_LABEL}" in proc.stderr, how
        assert "setup.py" not in proc.stdout + proc.stderr
        ran = run_sample(t213)
        assert Version(ran["version"]) == Version(f"{SAMPLE_VERSION}+{HOST_LABEL}"), how
        after = set(run(["uv", "pip", "freeze", "--python", t213], env=env).stdout.splitlines())
        moved = {line for line in freeze ^ after if not line.startswith(("flash", "pip=="))}
        assert not moved, f"{how} changed what was installed: {moved}"
        run([t213, "-m", "pip", "uninstall", "-y", "-q", "flash-attn"], env=env)


def test_a_torch_moved_under_the_teams_wheel_fails_naming_the_command_that_installed_it(
    team_cache, uv_cache, tmp_path
):
    """The team's torch 2.11 wheel installed by install.py, then torch moved under it by the
    frontend (`uv pip install torch==2.13.0+cpu`, silent, exit 0; `pip install -U torch` prints an
    ERROR line and exits 0 too): importing flash_attn fails with the guard's message, whose last
    line is the install command the wheel came from (read from the installer's direct_url.json);
    run verbatim, it installs torch 2.13's wheel, which runs. An uninstall leaves nothing."""
    python = uv_venv(tmp_path / "venv", ["torch==2.11.0"])  # from uv's cache, in seconds
    env = venv_env(python, uv_cache)
    install_py(python, team_cache, env=env)
    assert Version(run_sample(python)["version"]) == Version(f"{SAMPLE_VERSION}+{T211_LABEL}")
    torch = run([PY, "-c", "import torch; print(torch.__version__)"]).stdout.strip()
    links = [a for d in os.environ.get("PIP_FIND_LINKS", "").split() for a in ("--find-links", d)]
    move = ["uv", "pip", "install", "--python", python, *links, f"torch=={torch}"]
    run(move, env={**env, "UV_CACHE_DIR": str(UV_CACHE)})  # exits 0, says nothing
    broken = run([python, "-c", "import flash_attn"], env=env, check=False)
    assert broken.returncode == 1 and "built for a different torch" in broken.stderr
    command = broken.stderr.strip().splitlines()[-1].strip()
    assert command == shlex.join([str(python), str(team_cache / "install.py")]), broken.stderr
    run(["bash", "-c", command], env=env)
    ran = run_sample(python)
    assert Version(ran["version"]) == Version(f"{SAMPLE_VERSION}+{HOST_LABEL}")
    assert ran["torch"] == torch
    run([python, "-m", "pip", "uninstall", "-y", "-q", "flash-attn"], env=env)
    site = Path(
        run([python, "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"]).stdout.strip()
    )
    assert not list(site.glob("flash_attn*")), list(site.glob("flash_attn*"))


def test_the_install_command_picks_another_torchs_wheel_and_names_a_miss(
    team_cache, torch211_python, uv_cache, tmp_path
):
    """In torch 2.11.0+cu130's venv (no test installs there: --dry-run and --requirement), the
    cu130 wheel; asked for GPUs or a kernel set no entry has, one message naming what is missing
    and the build line; a wheel whose bytes are not its entry's is refused."""
    env = venv_env(torch211_python, uv_cache)
    dry = install_py(torch211_python, team_cache, "--dry-run", env=env)
    entry = entry_of(team_cache, T211_LABEL)
    wheel = entry.parent / json.loads(entry.read_text())["wheel"]
    assert shlex.split(dry.stdout) == [
        str(torch211_python), "-m", "pip", "install", "--no-deps", "--no-index",
        "--force-reinstall", direct_reference(entry),
    ]  # fmt: skip
    line = install_py(torch211_python, team_cache, "--requirement", env=env).stdout.strip()
    assert (
        line
        == f"flash-attn=={SAMPLE_VERSION}+{T211_LABEL} --hash=sha256:"
        + json.loads(entry.read_text())["sha256"]
    )
    args = ["--archs", "80", "--kernel-set", "hdim128.bf16"]
    miss = install_py(torch211_python, team_cache, *args, env=env, check=False)
    assert miss.returncode == 1 and "Traceback" not in miss.stderr
    # torch may warn first (2.11 without numpy)
    head, *has = [
        ln for ln in miss.stderr.splitlines() if ln.startswith(("install.py:", "  the cache has"))
    ]
    assert head == (
        f"install.py: no flash-attn wheel for torch 2.11.0+cu130, {TAG}, sm_80, kernel set "
        f"hdim128.bf16 in {team_cache}; build it: {torch211_python} -m pip install "
        f"--no-build-isolation --no-deps {REPO} -C wheel-cache-dir={team_cache} -C cuda-archs=80 "
        "(and the -C settings of kernel set hdim128.bf16)"
    ), head
    assert len(has) == 3 and any(f"torch 2.11.0+cu130, {TAG}-{TAG}" in h for h in has), has
    copy = shutil.copytree(team_cache, tmp_path / "fa", symlinks=True)
    tampered = copy / wheel.relative_to(team_cache)
    data = bytearray(tampered.read_bytes())
    data[len(data) // 2] ^= 1
    tampered.write_bytes(bytes(data))
    refused = install_py(torch211_python, copy, "--dry-run", env=env, check=False)
    assert refused.returncode == 1
    assert f"{tampered} is not the wheel its entry recorded" in refused.stderr


def test_each_python_gets_its_own_wheel_and_a_python_without_one_is_named(
    team_cache, torch211_second_python, uv_cache, tmp_path
):
    """In torch 2.11's venv of the second Python (--dry-run): install.py and the guide's pip line
    take that Python's wheel of the two one torch directory holds. With that wheel gone, install.py
    names the Python in its miss and the build line; the pip line fails on flash-attn's own line
    without reaching setup.py."""
    python = torch211_second_python
    env = venv_env(python, uv_cache)
    entry = entry_of(team_cache, T211_LABEL, SECOND_TAG)
    dry = install_py(python, team_cache, "--dry-run", env=env)
    assert shlex.split(dry.stdout)[-1] == direct_reference(entry), dry.stdout
    pip_line = in_venv(teammate_line("pip"), team_cache, "--dry-run", "-q", "--report -")
    (chosen,) = json.loads(run(pip_line, env=env).stdout)["install"]
    assert chosen["download_info"]["url"].endswith(f"-{SECOND_TAG}-{SECOND_TAG}-linux_x86_64.whl")
    copy = shutil.copytree(team_cache, tmp_path / "fa", symlinks=True)
    for view in copy.rglob(f"*-{SECOND_TAG}-*.whl"):  # the entry's wheel and its views
        view.unlink()
    shutil.rmtree(copy / entry.parent.name)
    miss = install_py(python, copy, env=env, check=False)
    assert miss.returncode == 1 and "Traceback" not in miss.stderr
    head = next(ln for ln in miss.stderr.splitlines() if ln.startswith("install.py:"))
    assert head == (
        f"install.py: no flash-attn wheel for torch 2.11.0+cu130, {SECOND_TAG}, kernel set full "
        f"in {copy}; build it: {python} -m pip install --no-build-isolation --no-deps {REPO} "
        f"-C wheel-cache-dir={copy}"
    ), head
    (has,) = [ln for ln in miss.stderr.splitlines() if f"torch 2.11.0+cu130, {TAG}-{TAG}" in ln]
    assert f"(its tags do not take {SECOND_TAG} on " in has, has
    pip = run(in_venv(teammate_line("pip"), copy, "--dry-run"), env=env, check=False)
    out = " ".join((pip.stdout + pip.stderr).split())
    assert pip.returncode != 0 and "No matching distribution found for flash-attn" in out, out
    assert "setup.py" not in out


def test_pip_and_uv_install_the_wheel_of_the_installed_torch(team_cache, t213, uv_cache):
    viewed = sorted(w.name for w in team_cache.glob("torch-*/*.whl"))
    assert len(viewed) == 3 and any(T211_LABEL.lower() in w.lower() for w in viewed)
    assert not list(team_cache.glob("*.whl"))  # no top level a frontend could swap torch from
    python = t213
    env = venv_env(python, uv_cache)
    freeze = run([python, "-m", "pip", "freeze"], env=env).stdout
    for frontend in ("pip", "uv"):
        proc = run(in_venv(teammate_line(frontend), team_cache), env=env)
        assert "setup.py" not in proc.stdout + proc.stderr
        ran = run_sample(python)
        assert Version(ran["version"]) == Version(f"{SAMPLE_VERSION}+{HOST_LABEL}"), frontend
        assert ran["torch"].startswith("2.13")
        after = run([python, "-m", "pip", "freeze"], env=env).stdout.splitlines()
        assert set(freeze.splitlines()) <= set(after), f"{frontend} changed what was installed"
        run([python, "-m", "pip", "uninstall", "-y", "-q", "flash-attn"], env=env)


def test_in_another_torchs_venv_both_resolve_its_own_wheel(team_cache, torch211_python, uv_cache):
    env = venv_env(torch211_python, uv_cache)
    report = run(
        in_venv(teammate_line("pip"), team_cache, "--dry-run", "-q", "--report -"),
        env=env,
    )
    installs = json.loads(report.stdout)["install"]
    chosen = {
        canonicalize_name(i["metadata"]["name"]): Version(i["metadata"]["version"])
        for i in installs
    }
    assert list(chosen) == ["flash-attn"], chosen
    assert chosen["flash-attn"] == Version(f"{SAMPLE_VERSION}+{T211_LABEL}")
    uv = run(in_venv(teammate_line("uv"), team_cache, "--dry-run"), env=env)
    would = re.findall(r"^ \+ (\S+)==(\S+)$", uv.stderr, re.M)
    assert [(n, Version(v)) for n, v in would] == [
        ("flash-attn", Version(f"{SAMPLE_VERSION}+{T211_LABEL}"))
    ], uv.stderr


@pytest.fixture(scope="module")
def cuda213(tmp_path_factory) -> dict[str, Path]:
    """Issue 55's N5: PyPI's CUDA torch 2.13.0, the release of this machine's CPU torch, in a
    venv with pip 23.2 and in one with the newest pip; its files only (no test imports it: the
    resolvers read its metadata)."""
    tmp = tmp_path_factory.mktemp("cu213")
    venvs = {}
    for pip in ("pip 23.2", "pip"):
        python = uv_venv(tmp / pip.replace(" ", ""), ["torch==2.13.0"], local=False, deps=False)
        if pip == "pip":
            run(["uv", "pip", "install", "-q", "--python", python, "-U", "pip"])
        venvs[pip] = python
    code = "import importlib.metadata as m; print(m.requires('torch'))"
    assert "nvidia-" in run([python, "-c", code]).stdout  # PyPI's CUDA build, not the local +cpu
    return venvs


@pytest.mark.parametrize("frontend", ["pip 23.2", "pip", "uv"])
def test_a_cuda_torch_pointed_at_the_cpu_torchs_directory_gets_one_resolver_error(
    team_cache, cuda213, uv_cache, frontend
):
    """N5: the guide's line typed with the CPU torch's directory (torch-2.13.0+cpu/) in the venv
    of PyPI's CUDA torch 2.13.0, on PyPI alone (no config: this machine's find-links serve the
    CPU torch): the resolver's error on the CPU wheel's torch==2.13.0+cpu, nothing installed,
    torch untouched. With an index that serves the CPU torch (these find-links, as
    download.pytorch.org/whl/cpu would), the frontend swaps torch for it: the guide's limit."""
    python = cuda213["pip" if frontend == "pip" else "pip 23.2"]
    cpu = team_cache / "torch-2.13.0+cpu"  # this machine's torch's, built by team_cache
    assert cpu.is_dir(), sorted(p.name for p in team_cache.iterdir())
    line = teammate_line("uv" if frontend == "uv" else "pip")
    line = re.sub(r'"\S*torch-\$\(.*\)"', str(cpu), line)
    assert str(cpu) in line, line
    env = venv_env(python, uv_cache)
    env = {k: v for k, v in env.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # pip reads no config file: PyPI only
    before = run(["uv", "pip", "freeze", "--python", python], env=env).stdout
    proc = run(["bash", "-c", line], env=env, check=False)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0 and "torch==2.13.0+cpu" in out, out
    assert "Traceback" not in out and "setup.py" not in out, out
    if frontend == "uv":
        assert "there is no version of torch==2.13.0+cpu" in out, out
    else:
        assert "No matching distribution found for torch==2.13.0+cpu" in out, out
    assert run(["uv", "pip", "freeze", "--python", python], env=env).stdout == before

    links = os.environ.get("PIP_FIND_LINKS", "").split()
    assert links, "this machine's find-links (its CPU torch) are gone"
    served = " ".join([line, *(f"--find-links {d}" for d in links), "--dry-run"])
    if frontend == "uv":
        swap = run(["bash", "-c", served], env=env).stderr
        assert re.search(r"^ - torch==2\.13\.0$", swap, re.M), swap
        assert re.search(r"^ \+ torch==2\.13\.0\+cpu$", swap, re.M), swap
    else:
        report = run(["bash", "-c", served + " -q --report -"], env=env).stdout
        planned = {
            i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report)["install"]
        }
        assert planned["torch"] == "2.13.0+cpu", planned


def guide_block(start: str, fence: str = "```toml") -> str:
    """The guide's fenced block (of `fence`) whose first line starts with `start`."""
    blocks = [b.split("```")[0] for b in FLEET.read_text().split(fence + "\n")[1:]]
    (block,) = [b for b in blocks if b.startswith(start)]
    return block


def consumer_project(path: Path, team_index: Path, torch_links: str) -> Path:
    """The guide's consumer pyproject.toml, its team index this cache's, its torch index the
    directory this machine's torch 2.13.0+cpu came from (PIP_FIND_LINKS, as uv_venv's)."""
    doc = tomllib.loads(guide_block("[project]"))
    team, torch = doc["tool"]["uv"]["index"]
    assert team["explicit"] and torch["explicit"] and team["url"].startswith("file://" + DOCS_ROOT)
    assert doc["tool"]["uv"]["sources"] == {
        "flash-attn": {"index": team["name"]}, "torch": {"index": torch["name"]}
    }  # fmt: skip
    assert "flash-attn" in doc["project"]["dependencies"]
    others = [d for d in doc["project"]["dependencies"] if d != "flash-attn"]  # `uv add`s it
    path.mkdir()
    (path / "pyproject.toml").write_text(
        f"""[project]
name = "consumer"
version = "0.1"
requires-python = "==3.11.*"
dependencies = {json.dumps(others)}

[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
py-modules = []

[[tool.uv.index]]
name = "{team["name"]}"
url = "{team_index.as_uri()}"
explicit = true

[[tool.uv.index]]
name = "{torch["name"]}"
url = "{torch_links}"
format = "flat"
explicit = true

[tool.uv.sources]
flash-attn = {{ index = "{team["name"]}" }}
torch = {{ index = "{torch["name"]}" }}
"""
    )
    return path


def test_a_project_syncs_and_pip_installs_the_teams_wheel_and_keeps_it(
    team_cache, t213, uv_cache, tmp_path
):
    """The guide's consumer project in torch 2.13.0+cpu's venv, the index reachable: `uv add
    flash-attn --no-sync` takes the team's source, `uv sync --inexact`, then `pip install .` with
    the guide's line, each installs the team's wheel (no setup.py, torch and every other package
    unchanged), and a later `pip install --upgrade` from the torch's directory with --only-binary
    keeps it."""
    links = next(d for d in os.environ.get("PIP_FIND_LINKS", "").split() if Path(d, ".").is_dir())
    project = consumer_project(tmp_path / "consumer", team_cache / "index/torch-2.13.0+cpu", links)
    env = venv_env(t213, uv_cache)
    env.update(UV_PROJECT_ENVIRONMENT=str(t213.parent.parent), UV_PYTHON_DOWNLOADS="never")
    freeze = set(run(["uv", "pip", "freeze", "--python", t213], env=env).stdout.splitlines())
    pip_line = guide_block("pip install --index-url file:", "```bash").strip()
    upgrade = [t213, "-m", "pip", "install", "--upgrade", "--only-binary", "flash-attn",
               "--find-links", team_cache / "torch-2.13.0+cpu", "flash-attn"]  # fmt: skip
    run(["uv", "add", "--no-sync", "flash-attn"], cwd=project, env=env)
    lock = tomllib.loads((project / "uv.lock").read_text())
    (locked,) = [p for p in lock["package"] if p["name"] == "flash-attn"]
    assert Version(locked["version"]) == Version(f"{SAMPLE_VERSION}+{HOST_LABEL}"), locked
    for how in (["uv", "sync", "--inexact"], in_venv(pip_line, team_cache), upgrade):
        proc = run(how, cwd=project, env=env)
        assert "setup.py" not in proc.stdout + proc.stderr, how
        assert Version(run_sample(t213)["version"]) == Version(f"{SAMPLE_VERSION}+{HOST_LABEL}")
        after = set(run(["uv", "pip", "freeze", "--python", t213], env=env).stdout.splitlines())
        moved = {ln for ln in freeze ^ after if not re.search("flash|consumer", ln)}
        assert not moved, f"{how} changed what was installed: {moved}"
    run([t213, "-m", "pip", "uninstall", "-y", "-q", "flash-attn", "consumer"], env=env)


def test_what_teammates_type_around_the_line_takes_their_wheel_or_fails(
    team_cache, t213, torch211_python, uv_cache, tmp_path
):
    """The issue's rows whose outcome the cache's layout decides, in torch 2.13.0+cpu's venv,
    --dry-run, the index reachable: the cache's top level (unpinned, or pinned to torch 2.11's
    wheel, which swapped torch when the top level held wheels) and a hashed requirement line
    written in torch 2.11's venv (with either torch's directory) fail on flash-attn's (or torch's)
    own line; the line install.py writes here takes this torch's wheel. None runs setup.py or
    moves torch."""
    env = venv_env(t213, uv_cache)
    elsewhere, here = tmp_path / "elsewhere.txt", tmp_path / "here.txt"
    elsewhere.write_text(install_py(torch211_python, team_cache, "--requirement", env=env).stdout)
    here.write_text(install_py(t213, team_cache, "--requirement", env=env).stdout)
    other = f"flash-attn=={SAMPLE_VERSION}+{T211_LABEL}"
    pip = [t213, "-m", "pip", "install", "--dry-run"]
    hashed = [*pip, "--require-hashes", "--find-links"]
    rows = {
        "top level": ([*pip, "--only-binary", "flash-attn", "--find-links", team_cache,
                       "flash-attn"], "No matching distribution found for flash-attn"),
        "top level, pinned": ([*pip, "--find-links", team_cache, other],
                              f"No matching distribution found for {other}"),
        "uv, top level, pinned": (["uv", "pip", "install", "--dry-run", "--find-links", team_cache,
                                   other], "no version of " + other.lower()),
        "written on 2.11, its directory": ([*hashed, team_cache / "torch-2.11.0+cu130", "-r",
                                            elsewhere], "torch==2.11.0 --hash"),
        "written on 2.11, this one's": ([*hashed, team_cache / "torch-2.13.0+cpu", "-r",
                                         elsewhere], f"No matching distribution found for {other}"),
    }  # fmt: skip
    for row, (cmd, says) in rows.items():
        proc = run(cmd, env=env, check=False)
        out = " ".join((proc.stdout + proc.stderr).split())  # uv wraps to the terminal's width
        assert proc.returncode != 0 and says in out and "setup.py" not in out, (row, out)
        assert "Would install" not in out, row
    report = run([*hashed, team_cache / "torch-2.13.0+cpu", "-r", here, "-q", "--report", "-"],
                 env=env)  # fmt: skip
    chosen = [i["metadata"]["version"] for i in json.loads(report.stdout)["install"]]
    assert [Version(v) for v in chosen] == [Version(f"{SAMPLE_VERSION}+{HOST_LABEL}")]


def _arch_entry(root: Path, wheel: Path, archs: list[str]) -> None:
    """An entry of torch 2.11's real wheel whose provenance says it holds code for `archs` (the
    sample compiles no CUDA: its builds record none), with the sha256 of these bytes."""
    entry = root / f"archs-{'-'.join(archs)}"
    entry.mkdir()
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(entry / wheel.name, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("/fa_shim_provenance.json"):
                data = json.dumps({**json.loads(data), "cuda_archs": archs}).encode()
            zout.writestr(info, data)
    record = {"wheel": wheel.name, "sha256": hashlib.sha256((entry / wheel.name).read_bytes())}
    record["sha256"] = record["sha256"].hexdigest()
    (entry / "entry.json").write_text(json.dumps(record))


def test_the_install_command_takes_the_entry_whose_archs_cover_the_gpus(
    team_cache, torch211_python, uv_cache, tmp_path
):
    """Two builds of one name for torch 2.11.0+cu130, sm_80 and sm_90,100, in torch 2.11's venv
    (--dry-run, GPUs named with --archs): an 8.6 GPU gets the sm_80 build, a 9.0 one the other,
    and both at once are a miss that names them and the line building the union."""
    root = tmp_path / "fa"
    root.mkdir()
    shutil.copy(team_cache / "install.py", root)
    (wheel,) = (team_cache / "torch-2.11.0+cu130").glob(f"*-{TAG}-*.whl")
    for archs in (["80"], ["90", "100"]):
        _arch_entry(root, wheel, archs)
    env = venv_env(torch211_python, uv_cache)
    # every form -C cuda-archs takes (hostile-inputs.md TC04: sm_90 and 90a were a ValueError)
    for gpus, entry in (
        ("86", "archs-80"),
        ("9.0", "archs-90-100"),
        ("sm_86", "archs-80"),
        ("8.0", "archs-80"),
        ("sm_90", "archs-90-100"),
        ("90a", "archs-90-100"),
    ):
        dry = install_py(torch211_python, root, "--dry-run", "--archs", gpus, env=env)
        chosen = shlex.split(dry.stdout)[-1]
        assert chosen == direct_reference(root / entry / "entry.json"), (gpus, dry.stdout)
    miss = install_py(torch211_python, root, "--archs", "80,90", env=env, check=False)
    assert miss.returncode == 1 and "Traceback" not in miss.stderr
    assert f"{TAG}, sm_80, sm_90, kernel set full" in miss.stderr
    assert "-C cuda-archs=80,90" in miss.stderr
    assert "(no code for sm_90)" in miss.stderr and "(no code for sm_80)" in miss.stderr
