#!/usr/bin/env python3
"""A seeded random sample of upstream's hopper/test_flash_attn.py, run against the INSTALLED FA3.

On the device (H100), with the flash-attn-3 wheel installed (and pytest, einops), for the
tailored build (bf16, head dim 128, forward + backward):

    tar xzf ../shared/fa3/flash-attention-v2.8.3-hopper.tar.gz -C /tmp
    python bench/fa3_upstream_tests.py --hopper /tmp/flash-attention-v2.8.3/hopper \\
        --disable HDIM64 HDIM96 HDIM192 HDIM256 FP16 --sample 100 --seed 15 --out $OUT/fa3-tests

(a full build: no --disable; add FP8, PAGEDKV, ... where the build disabled them too: the
summary warns where the installed wheel's fa-shim label, e.g. +...hdim128.bf16.nofp8, disagrees
with the switches.) It records, under --out: sampled_ids.txt (the sample, one pytest
node id a line), summary.json and summary.md (collected and eligible counts, what was filtered
and why, the switches, seed, sample, per-case outcome and duration, passed / failed / skipped,
the last lines of each failure, wall time, the flash_attn_interface file the tests imported)
and logs/ (pytest's output). `--list-only` stops after writing the sample.

Which cases: the test file reads FLASH_ATTENTION_DISABLE_{BACKWARD,SPLIT,PAGEDKV,APPENDKV,LOCAL,
SOFTCAP,PACKGQA,FP16,FP8,HDIM64..256} and shrinks its parametrisation (and inner loops) to what a
build with those switches has, so the switches the build was made with are set for collection
and run: those TRUE in this environment plus --disable, every other one said FALSE. Where the
test file does not shrink, node ids are filtered on their parameters (each rule and count is in
the summary): test_flash_attn_race_condition and test_flash_attn_kvcache/_cluster fix `d`
(kept when a compiled head dim >= d exists, as flash_api.cpp rounds d up); FP16 / FP8 switches
drop such dtypes (not in test_flash_attn_combine, whose kernels every build has); BACKWARD drops
the race-condition test (it always runs backward); VARLEN (not read by the test file) drops the
varlen and kvcache tests (the kvcache API always passes seqused_k, which flash_api.cpp counts
as varlen). The sample is stratified: --sample split evenly over the test functions (those
with fewer cases give theirs to the rest), each drawn with random.Random(--seed); --uniform
draws from all eligible ids at once.

Isolation: the three files the test imports (test_flash_attn.py, test_util.py, padding.py) are
copied into a fresh directory with its own pytest.ini (rootdir), so hopper/flash_attn_interface.py
cannot shadow the installed module; the summary records the module's file and the run stops if
it lies in --hopper. Cases run in one pytest process (or --chunk ids per process) under a wall
--budget; a case that failed or got no result (a crashed or timed-out process) is re-run alone
while the budget lasts, and that result counts (a CUDA error poisons the rest of a process).

Needs a CUDA device for collection (the test file calls torch.cuda.get_device_capability at
import unless FLASH_ATTENTION_DISABLE_FP8=TRUE). Exit status: 0 all ran cases passed or were
skipped; 1 a case failed, got no result or was not reached within --budget; 2 bad input or a
collection that failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEST_FILE = "test_flash_attn.py"
HELPERS = ("test_util.py", "padding.py")  # what test_flash_attn.py imports besides FA3 itself
PREFIX = "FLASH_ATTENTION_DISABLE_"
_GETENV = re.compile(r"""os\.getenv\(\s*["']FLASH_ATTENTION_DISABLE_(\w+)["']""")
HDIMS = (64, 96, 128, 192, 256)  # flash_api.cpp's round_up_headdim ladder
COMBINE = "test_flash_attn_combine"  # its kernels are compiled whatever the switches say
PLUGIN = "fa3_bench_plugin"

# Loaded into the pytest child: records the collected items (with their parameters), the
# module files the tests imported, and each report as it happens (a crash keeps what ran).
PLUGIN_SOURCE = """
import json, os, sys


def _plain(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)


def _file(name):
    return getattr(sys.modules.get(name), "__file__", None)


def pytest_collection_finish(session):
    path = os.environ.get("FA3_BENCH_COLLECT")
    if not path:
        return
    import torch

    test = sys.modules.get("test_flash_attn")
    doc = {
        "flash_attn_interface": _file("flash_attn_interface"),
        "flash_attn_3": _file("flash_attn_3"),
        "rotary_from_flash_attn": getattr(test, "apply_rotary_emb", None) is not None,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "items": [
            {
                "nodeid": item.nodeid,
                "function": getattr(item, "originalname", None) or item.name,
                "params": {k: _plain(v) for k, v in getattr(item, "callspec", None).params.items()}
                if getattr(item, "callspec", None)
                else {},
            }
            for item in session.items
        ],
    }
    with open(path, "w") as f:
        json.dump(doc, f)


def pytest_runtest_logreport(report):
    path = os.environ.get("FA3_BENCH_RESULTS")
    if not path:
        return
    rec = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "duration": report.duration,
    }
    if report.failed:
        rec["text"] = report.longreprtext[-6000:]
    elif report.skipped:
        rec["text"] = str(report.longrepr)[-500:]
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\\n")
"""


class Refusal(Exception):
    """Bad input or an environment the run cannot use: one message, exit status 2."""


def log(msg: str) -> None:
    print(f"fa3_upstream_tests: {msg}", file=sys.stderr, flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--hopper", required=True, type=Path, help="upstream's hopper/ directory")
    p.add_argument("--sample", type=int, default=100, help="cases to run (all if fewer)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--disable",
        nargs="*",
        default=[],
        metavar="NAME",
        help="switches the build was made with (HDIM64, FP16, PAGEDKV, ...), on top of the "
        f"{PREFIX}*=TRUE of this environment",
    )
    p.add_argument("--uniform", action="store_true", help="sample all ids at once, not per test")
    p.add_argument("--out", type=Path, default=Path("fa3-upstream-tests"), help="result folder")
    p.add_argument("--chunk", type=int, default=0, help="ids per pytest process (0: all in one)")
    p.add_argument("--budget", type=float, default=540, help="wall seconds for the whole run")
    p.add_argument("--collect-timeout", type=float, default=300)
    p.add_argument("--list-only", action="store_true", help="collect and sample; run nothing")
    args = p.parse_args(argv)
    if args.sample < 1:
        p.error("--sample must be >= 1")
    if args.chunk < 0 or args.budget <= 0:
        p.error("--chunk must be >= 0 and --budget > 0")
    return args


def known_switches(hopper: Path) -> tuple[str, ...]:
    """The switch names the test file (and setup.py, where present) read, in order."""
    names: dict[str, None] = {}
    for name in (TEST_FILE, "setup.py"):
        if (hopper / name).is_file():
            names.update(dict.fromkeys(_GETENV.findall((hopper / name).read_text())))
    return tuple(names)


def _flat(name: str) -> str:
    name = name.strip().upper()
    name = name.removeprefix(PREFIX)
    return re.sub(r"[-_\s]", "", name)


def chosen_switches(args, known: tuple[str, ...], environ) -> tuple[str, ...]:
    flat = {_flat(k): k for k in known}
    off = {k for k in known if environ.get(PREFIX + k) == "TRUE"}
    for value in args.disable:
        for part in value.split(","):
            if not part.strip():
                continue
            if _flat(part) not in flat:
                raise Refusal(
                    f"--disable {part!r} is not a switch this hopper/ knows; known: "
                    f"{', '.join(known)}"
                )
            off.add(flat[_flat(part)])
    return tuple(k for k in known if k in off)


def switch_env(known: tuple[str, ...], off: tuple[str, ...]) -> dict[str, str]:
    """Every switch said, TRUE or FALSE, so a stray variable cannot change the case set."""
    return {PREFIX + k: "TRUE" if k in off else "FALSE" for k in known}


def compiled_hdims(off: tuple[str, ...]) -> list[int]:
    return [d for d in HDIMS if f"HDIM{d}" not in off]


def filter_rules(off: tuple[str, ...]) -> list[tuple[str, object]]:
    """(reason, predicate(item) -> True when the build cannot run the case)."""
    rules = []
    hdims = compiled_hdims(off)
    top = max(hdims, default=0)

    def no_hdim(it):
        d = it["params"].get("d")
        return it["function"] != COMBINE and isinstance(d, int) and d > top

    if top < max(HDIMS):
        rules.append((f"d above the largest compiled head dim ({top})", no_hdim))
    for switch, dtype in (("FP16", "torch.float16"), ("FP8", "torch.float8_e4m3fn")):
        if switch in off:

            def no_dtype(it, dtype=dtype):
                return it["function"] != COMBINE and it["params"].get("dtype") == dtype

            rules.append((f"{switch} disabled: dtype {dtype}", no_dtype))
    if "BACKWARD" in off:
        rules.append(
            (
                "BACKWARD disabled: the race-condition test always runs backward",
                lambda it: it["function"] == "test_flash_attn_race_condition",
            )
        )
    if "VARLEN" in off:
        rules.append(
            (
                "VARLEN disabled: varlen and kvcache tests (kvcache passes seqused_k)",
                lambda it: (
                    it["function"] in ("test_flash_attn_varlen_output", "test_flash_attn_kvcache")
                ),
            )
        )
    return rules


def apply_filters(items: list[dict], rules) -> tuple[list[dict], list[dict]]:
    kept, report = [], {reason: 0 for reason, _ in rules}
    for it in items:
        reason = next((r for r, rule in rules if rule(it)), None)
        if reason is None:
            kept.append(it)
        else:
            report[reason] += 1
    return kept, [{"rule": r, "dropped": n} for r, n in report.items()]


def draw(items: list[dict], n: int, seed: int, uniform: bool) -> tuple[list[str], dict]:
    """The sample in collection order, and how many came from each test function."""
    rng = random.Random(seed)
    order = {it["nodeid"]: i for i, it in enumerate(items)}
    if uniform:
        picked = rng.sample([it["nodeid"] for it in items], min(n, len(items)))
    else:
        groups: dict[str, list[str]] = {}
        for it in items:
            groups.setdefault(it["function"], []).append(it["nodeid"])
        quota, left = {}, n
        pending = sorted(groups, key=lambda f: len(groups[f]))
        while pending:  # smallest first: what a small function cannot use goes to the rest
            f = pending.pop(0)
            quota[f] = min(len(groups[f]), left // (len(pending) + 1))
            left -= quota[f]
        if left:  # the remainder of the division, to the largest functions first
            for f in sorted(groups, key=lambda f: -len(groups[f])):
                extra = min(left, len(groups[f]) - quota[f])
                quota[f] += extra
                left -= extra
        picked = []
        for f in sorted(groups):
            picked += rng.sample(groups[f], quota[f])
    picked.sort(key=order.__getitem__)
    per_fn: dict[str, int] = {}
    fn_of = {it["nodeid"]: it["function"] for it in items}
    for nodeid in picked:
        per_fn[fn_of[nodeid]] = per_fn.get(fn_of[nodeid], 0) + 1
    return picked, per_fn


def prepare(hopper: Path, work: Path) -> None:
    for name in (TEST_FILE, *HELPERS):
        if not (hopper / name).is_file():
            raise Refusal(
                f"{hopper / name} does not exist: --hopper must be upstream's hopper/ directory "
                "(e.g. extracted from ../shared/fa3/flash-attention-v2.8.3-hopper.tar.gz)"
            )
        shutil.copy2(hopper / name, work / name)
    (work / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
    (work / "pytest.ini").write_text("[pytest]\n")  # rootdir here; no ini of anyone else's


def preflight(hopper: Path) -> dict:
    """What the test needs in this interpreter, without importing torch or CUDA here."""
    missing = [m for m in ("pytest", "einops", "torch") if importlib.util.find_spec(m) is None]
    spec = importlib.util.find_spec("flash_attn_interface")
    if spec is None:
        missing.append("flash_attn_interface (the flash-attn-3 wheel)")
    if missing:
        raise Refusal(
            f"{', '.join(missing)} not importable by {sys.executable}: upstream's test imports "
            "them. Install them (einops: `pip install einops`, or its wheel carried in offline)."
        )
    origin = Path(spec.origin).resolve()
    if origin.is_relative_to(hopper.resolve()):
        raise Refusal(
            f"flash_attn_interface resolves to {origin}, inside --hopper: the tests would run "
            "the source copy, not the installed wheel (PYTHONPATH or the current directory?)"
        )
    import importlib.metadata as md

    def version(dist):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    return {
        "flash_attn_interface_spec": str(origin),
        "versions": {d: version(d) for d in ("flash-attn-3", "flash-attn", "torch", "pytest")},
    }


def label_check(version: str | None, off: tuple[str, ...]) -> list[str]:
    """fa-shim's local label (e.g. +...hdim128.bf16) against the switches the tests use."""
    if not version or "+" not in version:
        return []
    tokens = version.split("+", 1)[1].split(".")
    notes = []
    hd = [int(t[4:]) for t in tokens if re.fullmatch(r"hdim\d+", t)]
    if hd and set(hd) != set(compiled_hdims(off)):
        notes.append(f"wheel label has head dims {hd}, the test switches {compiled_hdims(off)}")
    if "bf16" in tokens and "fp16" not in tokens and "FP16" not in off:
        notes.append("wheel label says bf16 only, but FP16 is not disabled for the tests")
    if "fwd" in tokens and "BACKWARD" not in off:
        notes.append("wheel label says forward only, but BACKWARD is not disabled for the tests")
    for t in tokens:
        if t.startswith("no") and t[2:].upper() not in off and _flat(t[2:]) not in off:
            notes.append(f"wheel label has {t}, but {t[2:].upper()} is not disabled for the tests")
    return notes


def _pytest(work: Path, env: dict, extra: list[str], log_path: Path, timeout: float):
    """Run pytest in `work`; (returncode or None if timed out, seconds)."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-p",
        PLUGIN,
        "--rootdir",
        str(work),
        "-c",
        str(work / "pytest.ini"),
        *extra,
    ]
    start = time.monotonic()
    with open(log_path, "w") as out:
        out.write("$ " + shlex.join(cmd[:14]) + (" ..." if len(cmd) > 14 else "") + "\n")
        out.flush()
        proc = subprocess.Popen(
            cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # our own child's group: pytest and anything it ran
            proc.wait()
            rc = None
    return rc, time.monotonic() - start


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def outcomes(results: Path) -> dict[str, dict]:
    """nodeid -> {outcome, duration, text} from the plugin's reports (setup/call/teardown)."""
    by_id: dict[str, dict] = {}
    if not results.exists():
        return by_id
    for line in results.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut by a killed process
        cur = by_id.setdefault(rec["nodeid"], {"outcome": None, "duration": 0.0, "text": ""})
        cur["duration"] += rec.get("duration") or 0.0
        if rec["outcome"] == "failed":
            cur["outcome"] = "failed" if rec["when"] == "call" else f"error ({rec['when']})"
            cur["text"] = rec.get("text", "")
        elif rec["outcome"] == "skipped" and cur["outcome"] is None:
            cur["outcome"], cur["text"] = "skipped", rec.get("text", "")
        elif rec["when"] == "call" and rec["outcome"] == "passed" and cur["outcome"] is None:
            cur["outcome"] = "passed"
    return by_id


def _last_lines(text: str, n: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


class Run:
    """The whole record; written after every step, so a killed run leaves what it had."""

    def __init__(self, args, out: Path):
        self.out = out
        self.doc: dict = {
            "command": shlex.join([sys.executable, *sys.argv]),
            "hopper": str(args.hopper.resolve()),
            "seed": args.seed,
            "sample_requested": args.sample,
            "stratified": not args.uniform,
            "complete": False,
        }
        self.start = time.monotonic()
        self.items: dict[str, dict] = {}

    def save(self) -> None:
        self.doc["wall_s"] = round(time.monotonic() - self.start, 1)
        tmp = self.out / "summary.json.tmp"
        tmp.write_text(json.dumps(self.doc, indent=1))
        tmp.replace(self.out / "summary.json")
        (self.out / "summary.md").write_text(markdown(self.doc))


def markdown(doc: dict) -> str:
    lines = [
        "# upstream hopper/test_flash_attn.py, a random sample",
        "",
        f"- command: `{doc['command']}`",
        f"- seed {doc['seed']}, "
        + ("stratified per test function" if doc["stratified"] else "uniform")
        + f", wall {doc.get('wall_s')} s, complete: {doc['complete']}",
    ]
    for key in ("gpu", "torch", "flash_attn_interface", "flash_attn_3"):
        if doc.get("collection", {}).get(key):
            lines.append(f"- {key}: {doc['collection'][key]}")
    if "versions" in doc:
        lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in doc["versions"].items()))
    if "switches_disabled" in doc:
        lines.append(f"- switches TRUE: {', '.join(doc['switches_disabled']) or 'none'}")
    for note in doc.get("warnings", []):
        lines.append(f"- WARNING: {note}")
    if "collected" in doc:
        lines.append(f"- collected {doc['collected']}, eligible {doc['eligible']}")
        for f in doc["filtered"]:
            lines.append(f"  - filtered out {f['dropped']}: {f['rule']}")
        per = ", ".join(f"{k} {v}" for k, v in doc["sample_per_function"].items())
        lines.append(f"- sampled {len(doc['sampled'])}: {per}")
    if "counts" in doc:
        lines.append("- " + ", ".join(f"{k} {v}" for k, v in doc["counts"].items()))
    bad = [c for c in doc.get("cases", []) if c["outcome"] not in ("passed", "skipped")]
    if bad:
        lines += ["", "## Not passed", ""]
        for c in bad:
            lines += [f"### `{c['nodeid']}`: {c['outcome']}", ""]
            lines += [f"{c['note']}", ""] if c.get("note") else []
            lines += ["```", c["tail"], "```", ""]
    if doc.get("cases"):
        lines += ["", "## The sample", "", "| case | outcome | s |", "|---|---|---|"]
        for c in doc["cases"]:
            lines.append(f"| `{c['nodeid']}` | {c['outcome']} | {c.get('duration_s', '')} |")
    if doc.get("error"):
        lines += ["", f"**error**: {doc['error']}"]
    return "\n".join(lines) + "\n"


def collect(work: Path, env: dict, out: Path, timeout: float) -> dict:
    path = work / "collected.json"
    env = {**env, "FA3_BENCH_COLLECT": str(path)}
    rc, secs = _pytest(work, env, ["--collect-only", "-q", TEST_FILE], out / "collect.log", timeout)
    if rc != 0 or not path.exists():
        raise Refusal(
            f"collection failed (rc {rc}, {secs:.0f} s); the end of {out / 'collect.log'}:\n"
            + _tail(out / "collect.log", 25)
        )
    doc = json.loads(path.read_text())
    log(f"collected {len(doc['items'])} cases in {secs:.0f} s")
    return doc


def run_cases(args, work: Path, env: dict, run: Run, ids: list[str], hopper: Path) -> None:
    logs = run.out / "logs"
    logs.mkdir(exist_ok=True)
    deadline = run.start + args.budget
    size = args.chunk or len(ids)
    final: dict[str, dict] = {}
    chunk_notes: dict[str, str] = {}
    for n, i in enumerate(range(0, len(ids), size)):
        chunk = ids[i : i + size]
        left = deadline - time.monotonic()
        if left < 10:
            break
        res = work / f"results-{n}.jsonl"
        info = work / f"run-collect-{n}.json"
        run_env = {**env, "FA3_BENCH_RESULTS": str(res), "FA3_BENCH_COLLECT": str(info)}
        log(f"chunk {n}: {len(chunk)} cases, {left:.0f} s of budget left")
        rc, secs = _pytest(work, run_env, ["-q", *chunk], logs / f"chunk-{n}.log", left)
        run.doc.setdefault("processes", []).append(
            {"log": f"logs/chunk-{n}.log", "cases": len(chunk), "rc": rc, "s": round(secs, 1)}
        )
        _check_module(info, hopper, run)
        got = outcomes(res)
        for nodeid in chunk:
            r = got.get(nodeid) or {"outcome": None, "duration": 0.0, "text": ""}
            if r["outcome"] is None:
                how = "timed out (budget)" if rc is None else f"exited {rc}"
                r = {**r, "outcome": "no result", "text": f"pytest {how}; see logs/chunk-{n}.log"}
                chunk_notes[nodeid] = _tail(logs / f"chunk-{n}.log")
            final[nodeid] = r
        _record(run, ids, final, chunk_notes)
    # alone, what failed or got no result in a process shared with other cases
    retry = [i for i in ids if final.get(i, {}).get("outcome") not in (None, "passed", "skipped")]
    if size > 1:
        for k, nodeid in enumerate(retry):
            left = deadline - time.monotonic()
            if left < 10:
                break
            res = work / f"alone-{k}.jsonl"
            rc, secs = _pytest(
                work,
                {**env, "FA3_BENCH_RESULTS": str(res)},
                ["-q", nodeid],
                logs / f"alone-{k}.log",
                left,
            )
            run.doc.setdefault("processes", []).append(
                {"log": f"logs/alone-{k}.log", "cases": 1, "rc": rc, "s": round(secs, 1)}
            )
            r = outcomes(res).get(nodeid) or {"outcome": None, "duration": 0.0, "text": ""}
            if r["outcome"] is None:
                how = "timed out (budget)" if rc is None else f"exited {rc}"
                r = {**r, "outcome": "no result", "text": f"pytest {how}; see logs/alone-{k}.log"}
                chunk_notes[nodeid] = _tail(logs / f"alone-{k}.log")
            r["shared_process_outcome"] = final[nodeid]["outcome"]
            r["alone"] = True
            final[nodeid] = r
            _record(run, ids, final, chunk_notes)
    _record(run, ids, final, chunk_notes)


def _check_module(info: Path, hopper: Path, run: Run) -> None:
    if not info.exists():
        return
    doc = json.loads(info.read_text())
    fai = doc.get("flash_attn_interface")
    run.doc.setdefault("run_imported", doc.get("flash_attn_interface"))
    if fai and Path(fai).resolve().is_relative_to(hopper.resolve()):
        raise Refusal(f"the tests imported {fai}, the source copy in --hopper, not the wheel")


def _record(run: Run, ids: list[str], final: dict, notes: dict) -> None:
    cases = []
    for nodeid in ids:
        if nodeid not in final:
            cases.append({"nodeid": nodeid, "outcome": "not run (budget)", "tail": ""})
            continue
        r = final[nodeid]
        case = {"nodeid": nodeid, "outcome": r["outcome"], "duration_s": round(r["duration"], 2)}
        if r["outcome"] not in ("passed",):
            errors = [ln for ln in r.get("text", "").splitlines() if ln.startswith("E ")]
            if errors:
                case["error"] = "\n".join(errors[:6])
            case["tail"] = _last_lines(r.get("text", "")) + (
                "\n" + notes[nodeid] if nodeid in notes else ""
            )
            note = _upstream_note(run.items.get(nodeid))
            if note:
                case["note"] = note
        for key in ("shared_process_outcome", "alone"):
            if key in r:
                case[key] = r[key]
        cases.append(case)
    counts: dict[str, int] = {}
    for c in cases:
        key = c["outcome"].split(" (")[0]
        counts[key] = counts.get(key, 0) + 1
    run.doc["cases"] = cases
    run.doc["counts"] = counts
    run.save()


def _upstream_note(item: dict | None) -> str:
    """Cases upstream's own checks refuse on every build: bf16 d not a multiple of 8."""
    d = (item or {}).get("params", {}).get("d")
    if item and item["function"] != COMBINE and isinstance(d, int) and d % 8:
        return "upstream: flash_api.cpp requires head_size % 8 == 0 (bf16/fp16) on every build"
    return ""


def main(argv=None) -> int:
    args = parse_args(argv)
    hopper = args.hopper
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    run = Run(args, out)
    work = Path(tempfile.mkdtemp(prefix="fa3-upstream-tests-"))
    try:
        if not (hopper / TEST_FILE).is_file():
            raise Refusal(
                f"{hopper / TEST_FILE} does not exist: --hopper must be upstream's hopper/ "
                "directory (extract ../shared/fa3/flash-attention-v2.8.3-hopper.tar.gz)"
            )
        known = known_switches(hopper)
        off = chosen_switches(args, known, os.environ)
        run.doc["switches_disabled"] = list(off)
        run.doc["switch_env"] = switch_env(known, off)
        run.doc.update(preflight(hopper))
        run.doc["warnings"] = label_check(run.doc["versions"].get("flash-attn-3"), off)
        for w in run.doc["warnings"]:
            log(f"WARNING: {w}")
        prepare(hopper, work)
        env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
        # keep a PYTHONPATH the install may need, without anything inside --hopper
        # (absolute: pytest runs in the copy's directory)
        path = [Path(p).resolve() for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        path = [str(p) for p in path if not p.is_relative_to(hopper.resolve())]
        env["PYTHONPATH"] = os.pathsep.join(path)
        env.update(switch_env(known, off), PYTHONDONTWRITEBYTECODE="1")
        col = collect(work, env, out, min(args.collect_timeout, args.budget))
        items = col.pop("items")
        run.doc["collection"] = col
        fai = col.get("flash_attn_interface") or ""
        if fai and Path(fai).resolve().is_relative_to(hopper.resolve()):
            raise Refusal(f"collection imported {fai}, the source copy, not the wheel")
        kept, filtered = apply_filters(items, filter_rules(off))
        ids, per_fn = draw(kept, args.sample, args.seed, args.uniform)
        run.items = {it["nodeid"]: it for it in kept}
        run.doc.update(
            collected=len(items),
            collected_per_function=_count(items),
            eligible=len(kept),
            filtered=filtered,
            sample_per_function=per_fn,
            sampled=ids,
        )
        (out / "sampled_ids.txt").write_text("".join(i + "\n" for i in ids))
        run.save()
        log(
            f"{len(kept)} eligible of {len(items)}; sampled {len(ids)} -> {out / 'sampled_ids.txt'}"
        )
        if args.list_only:
            run.doc["complete"] = True
            run.save()
            return 0
        run_cases(args, work, env, run, ids, hopper)
        run.doc["complete"] = True
        run.save()
        counts = run.doc["counts"]
        log("; ".join(f"{k} {v}" for k, v in counts.items()) + f" -> {out / 'summary.md'}")
        return 0 if set(counts) <= {"passed", "skipped"} else 1
    except Refusal as exc:
        run.doc["error"] = str(exc)
        run.save()
        log(str(exc))
        return 2
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _count(items: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for it in items:
        counts[it["function"]] = counts.get(it["function"], 0) + 1
    return counts


if __name__ == "__main__":
    sys.exit(main())
