#!/usr/bin/env python3
"""The speed table of issue 23: SDPA, v2.8.3's FA3 and the stable line's FA3, one row per length,
from two bench/fa3_speed.py runs on the same device (each build imported in its own process: both
register torch.ops.flash_attn_3).

    python bench/fa3_stable_table.py --stable $OUT/speed-stable.json --v283 $OUT/speed-v283.json

Prints markdown: TF/s forward / backward of each (SDPA from the stable run, the v2.8.3 run's in
brackets as a measure of the noise), the stable FA3 over SDPA and over v2.8.3, and each FA3's
largest output difference from SDPA."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _tf(entry: dict | None, phase: str) -> float | None:
    return ((entry or {}).get(phase) or {}).get("tflops")


def _pair(entry: dict | None) -> str:
    fwd, bwd = _tf(entry, "fwd"), _tf(entry, "bwd")
    if fwd is None:
        return "n/a"
    return f"{fwd:.0f} / {bwd:.0f}" if bwd is not None else f"{fwd:.0f} / —"


def _ratio(a: dict | None, b: dict | None) -> str:
    parts = []
    for phase in ("fwd", "bwd"):
        x, y = _tf(a, phase), _tf(b, phase)
        parts.append(f"{x / y:.2f}x" if x and y else "—")
    return " / ".join(parts)


def _diff(entry: dict | None) -> str:
    found = (entry or {}).get("max_abs_diff_vs_sdpa") or {}
    return f"{found['out']:.1e}" if "out" in found else "—"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--stable", required=True)
    ap.add_argument("--v283", required=True)
    args = ap.parse_args()
    stable, v283 = (json.loads(Path(p).read_text()) for p in (args.stable, args.v283))
    old = {r["seqlen"]: r for r in v283["results"]}
    env = stable.get("env", {})
    print(f"{env.get('gpu', '')}, torch {env.get('torch', '')}; " + json.dumps(stable["config"]))
    print()
    print(
        "| L | SDPA fwd / bwd (TF/s) | FA3 v2.8.3 | FA3 main-0251105a (stable ABI) "
        "| stable / SDPA | stable / v2.8.3 | out diff vs SDPA (v2.8.3, stable) |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in stable["results"]:
        before = old.get(row["seqlen"], {})
        print(
            f"| {row['seqlen'] // 1024}k | {_pair(row.get('sdpa'))} [{_pair(before.get('sdpa'))}] "
            f"| {_pair(before.get('fa3'))} | **{_pair(row.get('fa3'))}** "
            f"| {_ratio(row.get('fa3'), row.get('sdpa'))} "
            f"| {_ratio(row.get('fa3'), before.get('fa3'))} "
            f"| {_diff(before.get('fa3'))}, {_diff(row.get('fa3'))} |"
        )


if __name__ == "__main__":
    main()
