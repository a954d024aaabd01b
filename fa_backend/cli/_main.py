"""`python -m fa_backend COMMAND`: tools around the backend (verify, doctor, prepare, settings,
fingerprint, prebuild, cache)."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..core import _scratch
from ..core._errors import FaShimError
from ..core._failures import boundary
from ..resources import PROJECT


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (e.g. -C max-jobs=8)")
    return key, value


def _executable(python: str) -> str | None:
    exe = shutil.which(python) or python
    return exe if os.path.isfile(exe) and os.access(exe, os.X_OK) else None


def _with_checkout() -> dict[str, str]:
    """This environment, with this checkout's fa_backend first on PYTHONPATH."""
    path = os.pathsep.join(p for p in (str(PROJECT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _runs_fa_shim(exe: str) -> None:
    """fa-shim's own imports (tags, ELF) in another interpreter, asked before it runs there."""
    probe = _in(exe, ["-c", "import elftools, packaging"])
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        raise FaShimError(
            f"{exe} cannot run fa-shim: {last}.",
            fix=f"install what fa-shim reads tags and ELF with: `{exe} -m pip install pyelftools "
            "packaging`.",
        )


def _delegate(python: str, argv: list[str]) -> int:
    """Run `python -m fa_backend ARGV` in another interpreter (its torch, its tags), this
    checkout's fa_backend first on its path; its report and exit status are ours."""
    exe = _executable(python)
    if exe is None:
        raise FaShimError(
            f"--python {python} is not an executable interpreter.",
            fix="pass the python of the environment to check, e.g. --python /path/venv/bin/python.",
        )
    _runs_fa_shim(exe)
    sys.stdout.flush()
    sys.stderr.flush()
    return subprocess.run([exe, "-m", "fa_backend", *argv], env=_with_checkout()).returncode


def _settings(args: argparse.Namespace) -> int:
    from ..flavours import _registry
    from ..settings import _settings

    print(_settings.reference_markdown(_registry.declared()))
    return 0


def _prepare(args: argparse.Namespace) -> int:
    """Extract, patch, inject and let torch write build.ninja, without compiling anything."""
    from ..core import _log, _ownership
    from ..fleet import _cached, _compiling
    from ..pipeline import api as pipeline
    from ..toolchain import _jobs

    plan = pipeline.plan(dict(args.config_setting))
    # only a new, empty or fa-shim-made directory; a failed or interrupted prepare takes back
    # what it added and nothing else
    with _ownership.owned(Path(args.build_dir).absolute(), "--build-dir") as out:
        prep = _compiling.prepare(plan, _cached.toolchain(plan), out)
    estimate = pipeline.preview(
        plan, prep.tools, pipeline.build_sources(prep.commands), _jobs.available_cores()
    )
    for line in estimate.lines:  # what a build would print before compiling
        _log.info(line)
    summary = {
        "wheel": plan.wheel_name,
        "ninja_file": str(prep.ninja_file),
        "source": str(prep.source),
        "compile_commands": [
            {"kind": c.kind, "file": c.file, "args": c.args} for c in prep.commands
        ],
        "provenance": pipeline.provenance(plan, prep),
        "estimate": {
            "seconds": round(estimate.seconds) if estimate.seconds is not None else None,
            "sources": len(prep.commands),
            "archs": estimate.machine.archs,
            "jobs": estimate.machine.jobs,
            "threads": estimate.machine.threads,
            "lines": list(estimate.lines),
        },
    }
    print(json.dumps(summary, indent=1, default=str))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from ..verify import _verify

    if args.python:
        return _delegate(args.python, ["verify", args.path, *(["--json"] * args.json)])
    report = _verify.verify_path(args.path)
    print(json.dumps(report.as_dict(), indent=1) if args.json else report.render())
    return 0 if report.ok else 1


def _doctor(args: argparse.Namespace) -> int:
    from ..core import _log
    from . import _doctor

    project = Path(args.project).absolute() if args.project else PROJECT
    if args.python:
        argv = ["doctor", "--project", str(project), *(["--json"] * args.json)]
        return _delegate(args.python, argv)
    with _log.quiet():  # it builds nothing: no "building against torch ..." from here
        report = _doctor.diagnose(project)
    print(json.dumps(report.as_dict(), indent=1) if args.json else report.render())
    return 0 if report.ok else 1


def _fingerprint(args: argparse.Namespace) -> int:
    """This interpreter's fingerprint and whether the wheel cache holds its wheel."""
    from ..fleet import _cached, _entries, _wheel_cache
    from ..pipeline import api as pipeline

    plan = pipeline.plan(dict(args.config_setting))
    if not plan.settings.wheel_cache:
        raise FaShimError(
            "prebuild fills the wheel cache, and -C wheel-cache=false turns it off.",
            fix="drop wheel-cache=false (and name the shared directory: -C wheel-cache-dir=DIR).",
        )
    facts = pipeline.fingerprint(plan, _cached.toolchain(plan))
    key = _wheel_cache.key(facts)
    root = plan.settings.resolved_wheel_cache_dir
    cached = _wheel_cache.lookup(root, key, plan.wheel_name)
    entry = _entries.load(root / key, plan.wheel_name) if cached else None
    found = {
        "python": sys.executable,
        "key": key,
        "wheel": plan.wheel_name,
        "wheel_cache_dir": str(root),
        "cached": str(cached) if cached else None,
        "sha256": entry.sha256 if entry else None,  # for --require-hashes (prebuild --hashes)
        "fingerprint": facts,
    }
    print(json.dumps(found, indent=1, default=str))
    return 0


def _prebuild(args: argparse.Namespace) -> int:
    config = dict(args.config_setting)
    rows = [prebuild_one(python, config) for python in args.python]
    print(render(rows))
    if args.hashes:  # `name==version --hash=sha256:...` per wheel, for pip --require-hashes
        from packaging.utils import parse_wheel_filename

        hashed = [(parse_wheel_filename(r.wheel)[:2], r.sha256) for r in rows if r.sha256]
        print("\n".join(f"{name}=={version} --hash=sha256:{h}" for (name, version), h in hashed))
    return 1 if any(r.result == "failed" for r in rows) else 0


# `prebuild` fills the (shared) wheel cache for each environment of a cluster: its fingerprint,
# computed there, and on a miss one real `pip wheel` there, which stores the wheel as builds do.


@dataclasses.dataclass
class Row:
    python: str
    fingerprint: str = "-"
    wheel: str = "-"
    result: str = "failed"
    reason: str = ""
    seconds: float = 0.0
    sha256: str | None = None
    fix: str | None = None


def _failure(output: str) -> FaShimError:
    """The child's own error and fix if it printed them, else the last line it said."""
    said = dict(reversed(re.findall(r"fa-shim: (error|fix): (.*)", output)))  # the first of each
    last = ([x.strip() for x in output.splitlines() if x.strip()] or ["no output"])[-1]
    return FaShimError(said.get("error", last)[:300], fix=said.get("fix"))


def _options(config: dict[str, str]) -> list[str]:
    return [a for key, value in config.items() for a in ("-C", f"{key}={value}")]


def _in(python: str, argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, *argv], env=_with_checkout(), capture_output=True, text=True, timeout=timeout
    )


def _fingerprint_in(python: str, config: dict[str, str]) -> dict:
    proc = _in(python, ["-m", "fa_backend", "fingerprint", *_options(config)], timeout=900)
    if proc.returncode != 0:
        raise _failure(proc.stderr + proc.stdout)
    return json.loads(proc.stdout)


def prebuild_one(python: str, config: dict[str, str]) -> Row:
    row = Row(python)
    started = time.monotonic()
    exe = _executable(python)
    if exe is None:
        row.reason = "not an executable interpreter"
        return row
    try:
        _runs_fa_shim(exe)
        facts = _fingerprint_in(exe, config)
        row.fingerprint, row.wheel = facts["key"], facts["wheel"]
        if facts["cached"]:
            row.result, row.sha256 = "cached", facts["sha256"]
            return row
        sys.stderr.write(f"fa-shim: prebuild: building {row.wheel} with {exe}\n")
        with _scratch.directory("prebuild") as out:
            pip = ["-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(out)]
            proc = _in(exe, [*pip, str(PROJECT), *_options(config)])
        if proc.returncode != 0:
            raise _failure(proc.stderr + proc.stdout)
        stored = _fingerprint_in(exe, config)
        if not stored["cached"]:  # the build stored it, or it is not there
            raise FaShimError(f"the build succeeded but {facts['wheel_cache_dir']} has no entry")
        row.result, row.sha256 = "built", stored["sha256"]
    except FaShimError as exc:
        row.reason, row.fix = exc.cause, exc.fix
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        row.reason = str(exc)
    finally:
        row.seconds = time.monotonic() - started
    return row


def render(rows: list[Row]) -> str:
    table = [("environment", "fingerprint", "wheel", "result")]
    for r in rows:
        result = f"{r.result} ({r.seconds:.0f} s)" if r.result != "failed" else "failed"
        table.append((r.python, r.fingerprint, r.wheel, result))
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    for r in rows:
        if r.result == "failed":
            lines += [f"{r.python}: failed: {r.reason}", *([f"  fix: {r.fix}"] if r.fix else [])]
    count = collections.Counter(r.result for r in rows)
    lines.append(
        f"prebuild: {count['built']} built, {count['cached']} cached, {count['failed']} failed"
    )
    return "\n".join(lines)


def _cache(args: argparse.Namespace) -> int:
    from . import _cache_check

    config = dict(args.config_setting)
    return _cache_check.main(args.action, Path(args.directory), args.rebuild, config, args.sweep)


def _config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-C",
        "--config-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=_pair,
        help="a setting, as pip's -C takes it (docs/reference/settings.md); repeatable",
    )


def parser() -> argparse.ArgumentParser:
    """The command line, as `main` parses it (the CLI reference is generated from it)."""
    parser = argparse.ArgumentParser(prog="python -m fa_backend", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("settings", help="print the settings reference (markdown)")
    p.set_defaults(func=_settings)
    p = sub.add_parser("prepare", help="prepare the build tree and print the build description")
    p.add_argument("--build-dir", required=True, help="where to extract and prepare")
    _config(p)
    p.set_defaults(func=_prepare)
    p = sub.add_parser(
        "verify",
        help="check a flash-attn wheel, installed flash_attn or flash_attn_2_cuda*.so "
        "against a torch",
    )
    p.add_argument(
        "path", help="a .whl, flash_attn (the installed one), a site-packages dir, or a .so"
    )
    p.add_argument(
        "--python",
        metavar="INTERP",
        help="check against the torch of this interpreter (default: the running one)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    p.set_defaults(func=_verify)
    p = sub.add_parser("doctor", help="what a build here would use, and what is wrong")
    p.add_argument("--python", metavar="INTERP", help="diagnose this interpreter's environment")
    p.add_argument(
        "--project",
        metavar="DIR",
        help="the project to diagnose (default: the one whose fa_backend runs, e.g. "
        "flash-attn-3/ when run there)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    p.set_defaults(func=_doctor)
    p = sub.add_parser(
        "fingerprint", help="this environment's wheel-cache fingerprint (JSON) and cache entry"
    )
    _config(p)
    p.set_defaults(func=_fingerprint)
    p = sub.add_parser(
        "prebuild",
        help="build the wheel of each environment (--python, repeated) into the wheel cache",
    )
    p.add_argument(
        "--python",
        action="append",
        required=True,
        metavar="INTERP",
        help="the interpreter of one environment (repeat for each)",
    )
    p.add_argument(
        "--hashes",
        action="store_true",
        help="then print a requirement line with --hash=sha256 for each wheel",
    )
    _config(p)
    p.set_defaults(func=_prebuild)
    p = sub.add_parser(
        "cache",
        help="check a wheel cache's entries and objects (sha256, RECORD, verify; --sweep removes "
        "leftovers; --rebuild compares a local rebuild with no cache), or print requirement "
        "lines with --hash for --require-hashes",
    )
    p.add_argument(
        "action",
        choices=["check", "requirements"],
        help="check: audit every entry (exit status 1 on a failure); requirements: print a "
        "requirement line with --hash=sha256 for each entry",
    )
    p.add_argument("directory", help="the wheel cache (wheel-cache-dir)")
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="rebuild this environment's wheel (same -C settings as its build) with no object "
        "cache and no compiler cache, and compare its bytes with the entry's and each kernel "
        "object's with the cached one a build would link",
    )
    p.add_argument(
        "--sweep",
        action="store_true",
        help="remove what killed writers left (temporary names over an hour old) in the cache "
        "and its objects/",
    )
    _config(p)
    p.set_defaults(func=_cache)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return boundary(args.func, frontend=False)(args)  # a shell, not a frontend, runs it


if __name__ == "__main__":
    sys.exit(main())
