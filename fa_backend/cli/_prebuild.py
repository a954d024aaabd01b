"""`python -m fa_backend prebuild`: fill the (shared) wheel cache for every environment of a
cluster. For each interpreter, its fingerprint computed in it (`python -m fa_backend
fingerprint`) and, on a miss, one real `pip wheel` there, which stores the wheel as any build
does; a failure is recorded with its reason. The end is a table on stdout."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time

from ..core import _scratch
from ..core._errors import FaShimError
from ..resources import PROJECT


@dataclasses.dataclass
class Row:
    python: str
    fingerprint: str = "-"
    wheel: str = "-"
    result: str = "failed"
    reason: str = ""
    seconds: float = 0.0
    sha256: str | None = None


def describe(config: dict[str, str]) -> dict:
    """This interpreter's fingerprint and whether the wheel cache holds its wheel."""
    from ..fleet import _entries, _wheel_cache
    from ..pipeline import _build

    plan = _build.plan(config)
    if not plan.settings.wheel_cache:
        raise FaShimError(
            "prebuild fills the wheel cache, and -C wheel-cache=false turns it off.",
            fix="drop wheel-cache=false (and name the shared directory: -C wheel-cache-dir=DIR).",
        )
    facts = _build.fingerprint(plan, _build.toolchain(plan))
    key = _wheel_cache.key(facts)
    root = plan.settings.resolved_wheel_cache_dir
    cached = _wheel_cache.lookup(root, key, plan.wheel_name)
    entry = _entries.load(root / key, plan.wheel_name) if cached else None
    return {
        "python": sys.executable,
        "key": key,
        "wheel": plan.wheel_name,
        "wheel_cache_dir": str(root),
        "cached": str(cached) if cached else None,
        "sha256": entry.sha256 if entry else None,  # for --require-hashes (prebuild --hashes)
        "fingerprint": facts,
    }


def _reason(output: str) -> str:
    """fa-shim's own error line if there is one, else the last line of what the child said."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.split("fa-shim: error: ", 1)[1] for line in lines if "fa-shim: error: " in line]
    return (errors[0] if errors else lines[-1] if lines else "no output")[:300]


def _options(config: dict[str, str]) -> list[str]:
    return [a for key, value in config.items() for a in ("-C", f"{key}={value}")]


def _in(python: str, argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [python, *argv], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _fingerprint(python: str, config: dict[str, str]) -> dict:
    proc = _in(python, ["-m", "fa_backend", "fingerprint", *_options(config)], timeout=900)
    if proc.returncode != 0:
        raise FaShimError(_reason(proc.stderr + proc.stdout))
    return json.loads(proc.stdout)


def prebuild_one(python: str, config: dict[str, str]) -> Row:
    row = Row(python)
    started = time.monotonic()
    exe = shutil.which(python) or python
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        row.reason = "not an executable interpreter"
        return row
    try:
        facts = _fingerprint(exe, config)
        row.fingerprint, row.wheel = facts["key"], facts["wheel"]
        if facts["cached"]:
            row.result, row.sha256 = "cached", facts["sha256"]
            return row
        sys.stderr.write(f"fa-shim: prebuild: building {row.wheel} with {exe}\n")
        with _scratch.directory("prebuild") as out:
            pip = ["-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(out)]
            proc = _in(exe, [*pip, str(PROJECT), *_options(config)])
        if proc.returncode != 0:
            raise FaShimError(_reason(proc.stderr + proc.stdout))
        stored = _fingerprint(exe, config)
        if not stored["cached"]:  # the build stored it, or it is not there
            raise FaShimError(f"the build succeeded but {facts['wheel_cache_dir']} has no entry")
        row.result, row.sha256 = "built", stored["sha256"]
    except FaShimError as exc:
        row.reason = exc.cause
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        row.reason = str(exc)
    finally:
        row.seconds = time.monotonic() - started
    return row


def requirement_lines(rows: list[Row]) -> list[str]:
    """`name==version --hash=sha256:...` for each wheel built or found (pip --require-hashes)."""
    from packaging.utils import parse_wheel_filename

    lines = []
    for r in rows:
        if r.sha256 and r.wheel != "-":
            name, version, _, _ = parse_wheel_filename(r.wheel)
            lines.append(f"{name}=={version} --hash=sha256:{r.sha256}")
    return lines


def render(rows: list[Row]) -> str:
    table = [("environment", "fingerprint", "wheel", "result")]
    for r in rows:
        result = f"{r.result} ({r.seconds:.0f} s)" if r.result != "failed" else "failed"
        table.append((r.python, r.fingerprint, r.wheel, result))
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    lines += [f"{r.python}: failed: {r.reason}" for r in rows if r.result == "failed"]
    built = sum(r.result == "built" for r in rows)
    cached = sum(r.result == "cached" for r in rows)
    failed = sum(r.result == "failed" for r in rows)
    lines.append(f"prebuild: {built} built, {cached} cached, {failed} failed")
    return "\n".join(lines)
