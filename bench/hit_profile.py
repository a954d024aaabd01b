"""Where a wheel-cache hit spends its time, hook by hook (issue 24's cache-hit row).

    python bench/hit_profile.py PROJECT OUT_DIR -C key=value ...   # the settings of the hit

pip runs each PEP 517 hook in a fresh interpreter (pyproject_hooks' _in_process.py): startup,
`import fa_backend`, the hook. This script does the same, one subprocess per hook, and reports
each one's wall time split into interpreter start, backend import and the hook itself; the
build_wheel hook is also run under cProfile (OUT_DIR/build_wheel.prof, top entries printed).
The pip install around it (resolving, unpacking, byte-compiling) is timed by the caller.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from fa_backend import _hooks
t1 = time.perf_counter()
hook, profile = sys.argv[1], sys.argv[4]
args, kwargs = json.loads(sys.argv[2]), json.loads(sys.argv[3])
call = lambda: getattr(_hooks, hook)(*args, **kwargs)
if profile:
    import cProfile
    cProfile.run("result = call()", profile)
else:
    result = call()
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "hook_s": t2 - t1, "result": str(result)}))
"""


def settings(pairs: list[str]) -> dict[str, str]:
    return dict(p.split("=", 1) for p in pairs)


def run_hook(project: Path, hook: str, args: list, kwargs: dict, profile: str = "") -> dict:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, hook, json.dumps(args), json.dumps(kwargs), profile],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"{hook} failed:\n{proc.stderr[-3000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["wall_s"] = wall
    report["start_s"] = wall - report["import_s"] - report["hook_s"]
    return report


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("project", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("-C", dest="config", action="append", default=[])
    parser.add_argument("--top", type=int, default=30)
    a = parser.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    config = settings(a.config)
    rows = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as meta, tempfile.TemporaryDirectory() as wheels:
        cfg = {"config_settings": config}
        rows["get_requires_for_build_wheel"] = run_hook(
            a.project, "get_requires_for_build_wheel", [], cfg
        )
        rows["prepare_metadata_for_build_wheel"] = run_hook(
            a.project, "prepare_metadata_for_build_wheel", [meta], cfg
        )
        dist_info = rows["prepare_metadata_for_build_wheel"]["result"]
        prof = str(a.out / "build_wheel.prof")
        rows["build_wheel"] = run_hook(
            a.project,
            "build_wheel",
            [wheels],
            {**cfg, "metadata_directory": os.path.join(meta, dist_info)},
            prof,
        )
    total = time.perf_counter() - started
    for hook, r in rows.items():
        print(
            f"{hook:34} {r['wall_s']:6.3f} s = start {r['start_s']:.3f} + import "
            f"{r['import_s']:.3f} + hook {r['hook_s']:.3f}"
        )
    print(f"{'three hooks':34} {total:6.3f} s")
    (a.out / "hooks.json").write_text(json.dumps(rows, indent=1))
    import pstats

    stats = pstats.Stats(prof, stream=sys.stdout)
    stats.sort_stats("cumulative").print_stats(a.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
