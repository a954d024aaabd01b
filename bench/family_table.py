"""Per kernel family and dtype, the compile time of each translation unit of the
bench/kernel_families.sh runs in RESULTS_DIR (one column per flash-attn version).

    python bench/family_table.py RESULTS_DIR

Prints a markdown table: family (forward, forward causal, backward, backward causal, split-KV
forward, split-KV forward causal) x dtype -> seconds, plus flash_api.cpp, each run's wall time,
peak RSS and whether the wheel imported and verified.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fa_backend.pipeline import _stats

KERNEL = re.compile(r"flash_(fwd_split|fwd|bwd)_hdim(\d+)_(fp16|bf16)(_causal)?_sm\d+\.cu$")
FAMILY = {"fwd": "forward", "bwd": "backward", "fwd_split": "split-KV forward"}


def times(path: Path) -> dict[str, float]:
    out = {}
    for row in _stats.compiled(path):
        name = row["source"].rsplit("/", 1)[-1]
        match = KERNEL.search(name)
        if match:
            kind, dim, dtype, causal = match.groups()
            key = f"{FAMILY[kind]}{' causal' if causal else ''}, {dtype}, hdim {dim}"
        else:
            key = name
        out[key] = float(row["seconds"])
    return out


def main() -> int:
    results = Path(sys.argv[1])
    versions = sorted(p.name[: -len("-tus.jsonl")] for p in results.glob("*-tus.jsonl"))
    columns = {v: times(results / f"{v}-tus.jsonl") for v in versions}
    keys = sorted({k for c in columns.values() for k in c}, key=lambda k: (k.endswith(".cpp"), k))
    print("| translation unit | " + " | ".join(f"{v} (s)" for v in versions) + " |")
    print("|---|" + "---|" * len(versions))
    for key in keys:
        cells = [f"{columns[v][key]:.0f}" if key in columns[v] else "—" for v in versions]
        print(f"| {key} | " + " | ".join(cells) + " |")
    walls, checks = [], []
    for v in versions:
        run = json.loads((results / f"{v}.json").read_text())
        walls.append(f"{run['wall_s']:.0f} s, {run['peak_rss_gib']:.1f} GiB peak")
        text = (results / f"{v}-import.txt").read_text()
        ok = "imported flash_attn" in text and "result: OK" in text
        checks.append("imported, verify OK" if ok else "FAILED")
    print("| pip wheel: wall, peak RSS | " + " | ".join(walls) + " |")
    print("| import + verify | " + " | ".join(checks) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
