"""The documentation site (docs/, Sphinx + MyST) builds and stays current, with real programs:

- It builds in strict mode: a broken link, a `page.md#anchor` naming no heading of that page,
  a page in no toctree or any other warning fails the build (`-W --keep-going -n`); a small
  project with the same configuration shows that each of these does fail it.
- The generated pages (settings, command line, supported versions) are what `docs/generate.py`
  writes now (it runs `python -m fa_backend`).
- The cluster guide's job script sizes its jobs and reaches fa-shim through its variables.

What the pages say about the code is checked without running anything: tests/unit/test_docs.py.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

DOCS = REPO / "docs"
STRICT = ["-W", "--keep-going", "-n", "-q"]


def sphinx_build(source: Path, out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "sphinx", *STRICT, "-b", "html", "-d", out / "doctrees"]
    return subprocess.run(
        [*command, source, out / "html"],
        capture_output=True,
        text=True,
    )


# -------------------------------------------------------------------------------- the site


def test_the_site_builds_in_strict_mode(tmp_path):
    proc = sphinx_build(DOCS, tmp_path)
    assert proc.returncode == 0, (
        "the documentation does not build in strict mode (every warning is an error):\n"
        + proc.stderr[-6000:]
    )
    assert (tmp_path / "html" / "guides" / "cluster.html").is_file()


MINIMAL = {
    "index.md": "# Home\n\n[there](page.md#a-heading)\n\n```{toctree}\npage\n```\n",
    "page.md": "# Page\n\n## A heading\n",
}
BREAKAGES = {
    "broken link": ("index.md", "[gone](missing.md)\n", "cross-reference target not found"),
    "missing anchor": ("index.md", "[gone](page.md#no-such-heading)\n", "local id not found"),
    "page in no toctree": ("orphan.md", "# Orphan\n", "isn't included in any toctree"),
}


def _minimal_site(root: Path) -> Path:
    root.mkdir()
    shutil.copy(DOCS / "conf.py", root / "conf.py")
    for name, text in MINIMAL.items():
        (root / name).write_text(text)
    return root


def test_the_minimal_site_builds(tmp_path):
    """The control for the breakage tests: the same small site, unbroken, builds."""
    proc = sphinx_build(_minimal_site(tmp_path / "site"), tmp_path)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_the_strict_build_fails_on(breakage, tmp_path):
    site = _minimal_site(tmp_path / "site")
    name, text, warning = BREAKAGES[breakage]
    with (site / name).open("a") as f:
        f.write(text)
    proc = sphinx_build(site, tmp_path)
    assert proc.returncode != 0, f"a {breakage} did not fail the strict build"
    assert warning in proc.stderr, proc.stderr


# ------------------------------------------------------------------------ generated pages


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_pages_are_current():
    stale = _generator().stale()
    assert not stale, (
        "generated documentation pages are stale; regenerate them with "
        "`python3 docs/generate.py`:\n" + "\n".join(diff for _, diff in stale)[-6000:]
    )


def test_the_staleness_check_can_fail(tmp_path, monkeypatch):
    generate = _generator()
    shutil.copytree(DOCS / "reference", tmp_path / "reference")
    page = tmp_path / "reference" / "settings.md"
    page.write_text(page.read_text().replace("| `max-jobs` |", "| `max-jobz` |"))
    monkeypatch.setattr(generate, "DOCS", tmp_path)
    assert [path for path, _ in generate.stale()] == [page]


def _job_script() -> str:
    """The cluster guide's sbatch script."""
    text = (DOCS / "guides" / "cluster.md").read_text()
    (script,) = [b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "#SBATCH" in b]
    return script


def test_the_cluster_job_script_sizes_its_jobs_from_the_allocation(tmp_path):
    """Its job-sizing lines, run by bash with a job's variables: one job per 6 GiB of --mem, at
    most one per CPU, at least one."""
    script = _job_script()
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    start = script.index("jobs=$(( SLURM_MEM_PER_NODE")
    sizing = script[start : script.index("export FA_SHIM_MAX_JOBS", start)] + 'echo "$jobs"\n'
    for mem_mb, cpus, jobs in ((98304, 16, 16), (24576, 16, 4), (98304, 2, 2), (4096, 8, 1)):
        env = {"PATH": "/usr/bin:/bin", "SLURM_MEM_PER_NODE": str(mem_mb)}
        env["SLURM_CPUS_PER_TASK"] = str(cpus)
        out = subprocess.run(["bash", "-c", sizing], env=env, capture_output=True, text=True)
        assert out.stdout.strip() == str(jobs), (mem_mb, cpus, out.stdout, out.stderr)


def test_the_cluster_job_script_reaches_fa_shim_through_its_variables(tmp_path):
    """The script up to its `doctor` line, on this machine (no Slurm, no GPU: doctor reports the
    CPU-only torch, but first what a build would run): the job sizing arrives as its settings."""
    script = _job_script()
    head = script[: script.index("python -m fa_backend doctor")] + "python3 -m fa_backend doctor\n"
    head = re.sub(r"^source .*$", ":", head, flags=re.M)
    head = head.replace("/shared/src/fa-shim", str(REPO)).replace("/shared", str(tmp_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FA_SHIM_")}
    env.update(SLURM_MEM_PER_NODE="24576", SLURM_CPUS_PER_TASK="16")
    proc = subprocess.run(["bash", "-c", head], env=env, capture_output=True, text=True)
    assert "-> 4 compile job(s) x 1 nvcc thread(s)" in proc.stdout, proc.stdout + proc.stderr
