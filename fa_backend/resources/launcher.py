"""Compiler launcher, run by path (stdlib only) for every compile of torch's build.ninja:
`python launcher.py STATS_FILE COMPILER [ARGS...]` appends the TU's start, wall time, peak RSS
and exit status to STATS_FILE (and STATS_FILE.started), and names a death by signal in the
log: the OOM killer's SIGKILL otherwise leaves nothing but "FAILED:" behind."""

import importlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

PROBE_ENV = "_FA_SHIM_PROBE"  # set by fa-shim's preflight (_preflight.py)
KEEP_ENV = "_FA_SHIM_NVCC_KEEP"  # set for the upstream build (pipeline/_reproducible.py)
SEED_ENV = "_FA_SHIM_NVCC_SEED"  # set where nvcc takes --frandom-seed (pipeline/_reproducible.py)
# a wrapper the caller names ("module:function", fa-shim's fleet/: the object cache), asked first
# for each compile once its spec exists (pipeline/_compile_plan.Wrappers)
SERVE_ENV, SPEC_ENV = "_FA_SHIM_SERVE", "_FA_SHIM_SERVE_SPEC"
SPEC_NAME = "fa-shim-objects.json"  # the spec, beside the run's records (pipeline/_stats)


def _source(args):
    sources = [a for a in args if a.endswith((".cu", ".cpp", ".cc", ".cxx", ".c")) and a[:1] != "-"]
    return os.path.basename(sources[-1]) if sources else "?"


def _keep_dir(command):
    """Where nvcc keeps this object's intermediate files (KEEP_ENV), one directory per object:
    kept, they are named after the source, not tmpxft_<pid>_..., names the host object holds."""
    if os.environ.get(KEEP_ENV) != "1" or not _source(command).endswith(".cu"):
        return None
    if any(a in ("-keep", "--keep", "-keep-dir", "--keep-dir") for a in command):
        return None  # the build's own choice
    out = [command[i + 1] for i, a in enumerate(command[:-1]) if a == "-o"]
    return os.path.abspath(out[-1]) + ".fa-shim-keep" if out else None


def _seeded(command):
    """nvcc's command with a seed per source file (SEED_ENV): cudafe++ and the host compiler
    otherwise name internal-linkage entities after a new random number each compile."""
    if os.environ.get(SEED_ENV) != "1" or not _source(command).endswith(".cu"):
        return command
    if any(a.startswith(("-frandom-seed", "--frandom-seed")) for a in command):
        return command  # the build's own choice
    return [*command, f"--frandom-seed={_source(command)}"]


def started_file(stats_file):
    """Where a TU's start is recorded (a line each): progress tells running from pending."""
    return type(stats_file)(str(stats_file) + ".started")


def _compile(command):
    """Compile, or let the wrapper serve the unit: `serve(spec, command, compile)` returns the
    exit status and what served it (None: compiled)."""
    spec, serve = os.environ.get(SPEC_ENV), os.environ.get(SERVE_ENV)
    if not (spec and serve and os.path.isfile(spec)):
        return subprocess.call(command), None
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    module, _, name = serve.partition(":")
    serve = getattr(importlib.import_module(module), name)
    return serve(spec, command, lambda: subprocess.call(command))


def main():
    stats_file, command = sys.argv[1], sys.argv[2:]
    if os.environ.get(PROBE_ENV) and os.path.basename(command[0]).startswith(("ccache", "sccache")):
        command = command[1:]  # fa-shim's toolchain probe: nothing to share with other builds
    command = _seeded(command)
    kept = _keep_dir(command)
    if kept:
        command = [*command, "-keep", "-keep-dir", kept]
        os.makedirs(kept, exist_ok=True)
    started, start = time.time(), time.monotonic()
    if _source(command) != "?":  # nvcc's own probes name no source
        with open(started_file(stats_file), "a") as f:
            f.write(json.dumps({"source": _source(command), "started": round(started, 2)}) + "\n")
    try:
        code, served = _compile(command)
    finally:
        if kept:
            shutil.rmtree(kept, ignore_errors=True)
    seconds = time.monotonic() - start
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    record = {
        "source": _source(command),
        "seconds": round(seconds, 2),
        "started": round(started, 2),  # wall clock: the compile phase's span, across jobs
        "peak_rss_mib": peak_kib // 1024,
        "exit": code,
        "cached": served is not None,  # served by the wrapper: no compile
        "object": served,  # the wrapper's record of it, for the provenance (pipeline/_stats)
    }
    with open(stats_file, "a") as f:  # one short O_APPEND write per TU: safe across jobs
        f.write(json.dumps(record) + "\n")
    if code < 0:
        name = signal.Signals(-code).name
        sys.stderr.write(
            f"fa-shim: the compiler was killed by signal {-code} ({name}) while compiling "
            f"{record['source']} (peak {record['peak_rss_mib']} MiB)"
            + (": the out-of-memory killer?\n" if -code == signal.SIGKILL else "\n")
        )
        return 128 - code
    return code


if __name__ == "__main__":
    sys.exit(main())
