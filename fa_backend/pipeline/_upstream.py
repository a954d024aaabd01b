"""Running upstream setup.py in a child process under fa-shim's rules: its environment, the
compiler launcher, its log, what its exit status means and the out-of-memory diagnosis."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import _failures, _log
from ..core._errors import FaShimError
from ..resources import DRIVER, LAUNCHER, launcher, process_session
from ..resources.process_session import PARENT_ENV
from ..resources.upstream_driver import BLOCKED_EXIT
from ..toolchain import _compilers
from . import _reproducible, _seal, _stats

if TYPE_CHECKING:
    from ..flavours._interface import Plan, Tools
    from ._compile_plan import CompilePlan, Wrappers

# set by a user for upstream's setup.py; each would change the build behind fa-shim's label
_SCRUBBED_ENV = (
    "FLASH_ATTENTION_SKIP_CUDA_BUILD",
    "FLASH_ATTENTION_FORCE_CXX11_ABI",
    "FLASH_ATTENTION_ENABLE_VCOLMAJOR",  # FA3's layout switch, not in the label
)


def _launcher_script(path: Path, stats: Path, compiler: str, cache: str | None) -> str:
    """A one-line executable standing in for a compiler (torch's CXX and PYTORCH_NVCC take one
    command); `compiler` is the user's own text, for the shell to split."""
    prefix = f"{shlex.quote(cache)} " if cache else ""
    path.write_text(
        "#!/bin/sh\n"
        f"exec {shlex.quote(sys.executable)} {shlex.quote(str(LAUNCHER))} "
        f'{shlex.quote(str(stats))} {prefix}{compiler} "$@"\n'
    )
    path.chmod(0o755)
    return str(path)


def environment(
    plan: Plan, tools: Tools, scratch: Path, jobs: int | None, wrappers: Wrappers
) -> dict[str, str]:
    env = dict(os.environ)
    for name in _SCRUBBED_ENV:
        if env.pop(name, None) is not None:
            _log.warn(f"ignoring {name}: fa-shim decides how the extension is built")
    env["FLASH_ATTENTION_FORCE_BUILD"] = "TRUE"  # upstream's switch off its wheel download
    env["BUILD_TARGET"] = "cuda"
    env["PYTHONUNBUFFERED"] = "1"
    # torch >= 2.12 puts ccache/sccache in front of the compiler on its own; fa-shim decides that
    # (setting compiler-cache) inside its launcher, where the cache sees the real compiler.
    env["TORCH_NO_COMPILER_WRAPPER"] = "1"
    bin_dir, stats = scratch / "bin", _stats.stats_file(scratch)
    bin_dir.mkdir(exist_ok=True)
    cache = tools.compiler_cache
    env["CXX"] = _launcher_script(bin_dir / "cxx", stats, os.environ.get("CXX", "c++"), cache)
    if tools.nvcc:
        home = tools.nvcc.cuda_home
        env["CUDA_HOME"] = str(home)
        env["PATH"] = f"{home / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        real_nvcc = os.environ.get("PYTORCH_NVCC") or shlex.quote(str(tools.nvcc.path))
        env["PYTORCH_NVCC"] = _launcher_script(bin_dir / "nvcc", stats, real_nvcc, cache)
        env.update(tools.archs.env)
    env.update(plan.flavour.environment(plan, tools))
    env = {**wrappers.env, **env}  # the user's own settings win
    # always set: unset, upstream's setup.py picks its own, through psutil in some releases
    # (their flavour leaves it out of setup_requires); a prepare compiles nothing
    env["MAX_JOBS"] = str(jobs or 1)
    if tools.nvcc_threads:
        env["NVCC_THREADS"] = str(tools.nvcc_threads)
    env[_reproducible.KEEP_ENV] = "1"  # nvcc's files under fixed names (launcher)
    if wrappers.serve:  # asked before each compile, once the spec exists (launcher._compile)
        env[launcher.SERVE_ENV] = wrappers.serve
        env[launcher.SPEC_ENV] = str(scratch / launcher.SPEC_NAME)
    if tools.nvcc and _compilers.nvcc_takes_random_seed(tools.nvcc.path):
        env[_reproducible.SEED_ENV] = "1"  # a random seed per source file (launcher)
    return env


def run_setup(
    plan: Plan,
    tools: Tools,
    source: Path,
    dist: Path,
    mode: str,
    log: Path,
    wrappers: Wrappers,
    units: CompilePlan | None = None,
) -> tuple[int, str, dict]:
    """Run upstream setup.py bdist_wheel ("wheel") or stop once build.ninja exists ("prepare");
    `units`: the compile plan, its jobs and its part of the driver's spec (order, pools)."""
    scratch = source.parent
    spec_path = scratch / f"fa-shim-{mode}.json"
    report_path = scratch / f"fa-shim-{mode}-report.json"
    spec = {
        "setup_dir": str(source),
        "mode": mode,
        "dist_dir": str(dist),
        "report": str(report_path),
        "abi": plan.torch.abi,
        "cxx_std": plan.torch.cxx_std,
        # torch-free CUDA sources compile by their own -std, without torch's and Python's
        # include paths and defines: their objects (and compiler caches) serve every torch
        "torch_free_kernels": plan.flavour.torch_free_kernels(plan),
        "extra_sys_path": plan.torch.extra_sys_path,
        **plan.flavour.driver_spec(plan, tools, source),
        **(units.driver_spec() if units else {}),
        "prefix_flags": _reproducible.compile_flags(plan, tools, scratch),
    }
    spec_path.write_text(json.dumps(spec))
    command = [sys.executable, str(DRIVER), str(spec_path)]
    env = environment(plan, tools, scratch, units.jobs if units else None, wrappers)
    if mode == "prepare":  # the tools setup.py will call, found as it will find them
        problems = _compilers.host_compiler_problems()
        problems.append(_compilers.ninja_problem(env.get("PATH", os.defpath)))
        for problem in filter(None, problems):
            raise problem
    _log.info(f"running upstream setup.py ({mode}); full log: {log}")
    with _seal.sealed(command, env) as (command, env):
        code, output = run_logged(command, source, env, log)
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    return code, output, report


def failure(code: int, report: dict, log: Path, output: str) -> FaShimError:
    """The error for a failed upstream run, quoting this run's output (not the log's earlier
    attempts)."""
    if code == BLOCKED_EXIT:
        return FaShimError(
            f"upstream's build tried to reach the network ({report.get('blocked')}); fa-shim "
            "forbids network access during the build so that no prebuilt binary can slip in.",
            fix="report this: this flash-attn version has a download path fa-shim does not "
            f"disable yet. Full log: {log}",
        )
    full = _failures.no_space_in(output)  # a full disk is not a compiler error
    if full:
        return full
    return FaShimError(
        f"the upstream build failed (exit status {code}).",
        details=first_errors(output),
        fix=f"read the full log: {log}",
    )


def first_errors(output: str, limit: int = 15) -> str:
    """The first compiler error and the lines right after it, without the Python traceback."""
    pattern = re.compile(
        r"(error:|error\b.*:|FAILED:|fatal|Killed|killed by signal|undefined reference)",
        re.IGNORECASE,
    )
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if pattern.search(line)), None)
    if start is None:
        return "\n".join(lines[-limit:])
    excerpt = []
    for line in lines[start : start + limit]:
        if line.startswith(("Traceback", "ninja: build stopped")):
            break
        excerpt.append(line)
    return "\n".join(excerpt)


# The compiler's own words when it (or its cc1plus/cicc/ptxas) dies of SIGKILL, and ours.
_OOM = re.compile(
    r"killed by signal 9|Killed signal terminated program|died due to signal 9|"
    r"signal 9 \(Kill|^Killed$|exit status 137",
    re.MULTILINE,
)


def run_logged(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[int, str]:
    """Run to completion; return (exit status, this run's output)."""
    lines: list[str] = []
    with log.open("a", buffering=1) as out:  # whole lines: _progress appends to it too
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env={**env, PARENT_ENV: str(os.getpid())},  # the child ends with us (the driver)
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,  # its own session: stopped as a whole (see below)
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                out.write(line)
                lines.append(line)
                if _log.is_verbose():
                    sys.stderr.write(line)
            code = proc.wait()
        except BaseException as exc:  # Ctrl-C, a full disk for the log: no compiler outlives us
            stop_group(proc)
            _failures.name_it(exc, log)
            raise
    if code == -signal.SIGINT:  # the group got Ctrl-C before we did
        raise KeyboardInterrupt
    return code, "".join(lines)


def stop_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """End the child's whole session (orphans included): SIGTERM, then SIGKILL after `grace`."""
    process_session.end(proc.pid, grace)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def killed_for_memory(output: str) -> bool:
    return bool(_OOM.search(output))
