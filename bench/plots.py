"""The documentation's pictures, from the recorded runs: one command regenerates every image.

    python3 bench/plots.py [--out docs/images]

- build-time-vs-cores.svg: the build-time model (the estimate module's `predict`) for flash-attn
  2.8.3's full and tailored sets against cores and jobs, with the measured builds
  (bench/results/2026-11-22-h100, -h200-tailored, 2026-11-22-ccache);
- unit-time-memory.svg: each translation unit's compile time and peak memory, FA2's full set
  (run3's launcher records) and FA3's full set as far as it got (2026-11-23-h100-fa3);
- kernel-speed.svg: FA2, SDPA and FA3 forward and backward TFLOP/s on the H100
  (2026-11-23-h100-fa3/fa3_speed.json).

The SVGs are written with a fixed hash salt and no date, so regenerating from the same data and
matplotlib gives the same files. Needs matplotlib (tests/requirements.txt has it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fa_backend.flavours.fa2._costs import model  # noqa: E402  (FA2's cost model)
from fa_backend.schedule._schedule import Machine, predict  # noqa: E402

FA2_COST = model(0)

RUNS = ROOT / "bench" / "results"
H100 = RUNS / "2026-11-22-h100"
FA3 = RUNS / "2026-11-23-h100-fa3"
IMAGES = ("build-time-vs-cores.svg", "unit-time-memory.svg", "kernel-speed.svg")
COLOURS = {
    "full": "tab:blue",
    "full4": "tab:purple",
    "tailored": "tab:orange",
    "parts": "tab:green",
}
# the inference set of 2.8.3 (4 forward kernel sources) and flash_api.cpp
TAILORED = [
    f"flash_fwd{s}_hdim128_bf16{c}_sm80.cu" for s in ("", "_split") for c in ("", "_causal")
] + ["flash_api.cpp"]


def records(path: Path) -> list[dict]:
    """The launcher's records of a run: one JSON object a line (source, seconds, peak_rss_mib,
    exit); '?' lines are compiler calls that are not translation units (probes, links)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("source", "?") != "?"]


def wall(path: Path) -> float:
    return json.loads(path.read_text())["wall_s"]


def build_time(out: Path) -> None:
    full = [r["source"] for r in records(H100 / "run3" / "full-tus.jsonl") if r["exit"] == 0]
    parts = [r["source"] for r in records(H100 / "run3" / "tailored-tus.jsonl") if r["exit"] == 0]
    sets = {
        "full": ("full set, 1 arch", full, 1),
        "full4": ("full set, 4 archs", full, 4),
        "tailored": ("tailored hdim128/bf16/fwd, 1 arch", TAILORED, 1),
        "parts": ("the same in 4 parts, 1 arch", parts, 1),
    }
    cores = [1, 2, 4, 8, 16, 32, 64]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    for key, (label, sources, archs) in sets.items():
        minutes = [predict(sources, Machine(c, 1, c, archs), FA2_COST) / 60 for c in cores]
        left.plot(cores, minutes, "-", color=COLOURS[key], label=f"model: {label}")
        jobs = list(range(1, 17))
        minutes = [predict(sources, Machine(j, 1, 16, archs), FA2_COST) / 60 for j in jobs]
        right.plot(jobs, minutes, "-", color=COLOURS[key])
    measured = [
        ("full", 16, wall(H100 / "run3" / "full.json"), "H100, run3"),
        *(
            ("parts", 16, wall(H100 / r / "tailored.json"), "H100")
            for r in ("run3", "run5", "run6")
        ),
        ("tailored", 16, wall(RUNS / "2026-11-22-h200-tailored" / "tailored.json"), "H200"),
        ("tailored", 2, wall(RUNS / "2026-11-22-ccache" / "ccache-cold.json"), "2-core box"),
    ]
    seen = set()
    for key, n, seconds, where in measured:
        label = None if (key, where) in seen else f"measured: {sets[key][0]} ({where})"
        seen.add((key, where))
        left.plot(n, seconds / 60, "o", color=COLOURS[key], label=label, markeredgecolor="black")
    left.set(
        xscale="log",
        yscale="log",
        xlabel="cores (one compile job per core)",
        ylabel="build time (minutes)",
        title="Against cores",
    )
    left.set_xticks(cores, [str(c) for c in cores])
    right.set(xlabel="compile jobs on 16 cores", title="Against jobs, 16 cores")
    right.set_xticks([1, 2, 4, 8, 12, 16])
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7, loc="upper right")
    fig.suptitle("flash-attn 2.8.3: modelled build time (estimate model) and measured builds")
    fig.tight_layout()
    save(fig, out / "build-time-vs-cores.svg")


def unit_time_memory(out: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.8))
    fa2 = [r for r in records(H100 / "run3" / "full-tus.jsonl") if r["exit"] == 0]
    ax.scatter(
        [r["seconds"] for r in fa2],
        [r["peak_rss_mib"] / 1024 for r in fa2],
        s=18,
        color="tab:blue",
        label=f"FA2 2.8.3 full set, sm_90 ({len(fa2)} units)",
    )
    fa3 = records(FA3 / "full-compile-stats.jsonl")
    done = [r for r in fa3 if r["exit"] == 0]
    killed = [r for r in fa3 if r["exit"] != 0]
    ax.scatter(
        [r["seconds"] for r in done],
        [r["peak_rss_mib"] / 1024 for r in done],
        s=18,
        color="tab:red",
        label=f"FA3 full set, sm_90a ({len(done)} units)",
    )
    ax.scatter(
        [r["seconds"] for r in killed],
        [r["peak_rss_mib"] / 1024 for r in killed],
        marker="x",
        color="tab:red",
        label=f"FA3, killed for lack of memory ({len(killed)})",
    )
    ax.set(
        xlabel="compile time of the unit (s)",
        ylabel="peak memory of the unit (GiB)",
        title="One translation unit each, H100 machine, 16 cores",
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    save(fig, out / "unit-time-memory.svg")


def kernel_speed(out: Path) -> None:
    data = json.loads((FA3 / "fa3_speed.json").read_text())
    config, results = data["config"], data["results"]
    impls = {"fa2": "FA2 (fa-shim)", "sdpa": "torch SDPA", "fa3": "FA3 (fa-shim)"}
    colours = {"fa2": "tab:blue", "sdpa": "tab:gray", "fa3": "tab:red"}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    width = 0.26
    for ax, passage in zip(axes, ("fwd", "bwd")):
        for i, (impl, label) in enumerate(impls.items()):
            xs = [k + (i - 1) * width for k in range(len(results))]
            values = [r[impl][passage]["tflops"] for r in results]
            bars = ax.bar(xs, values, width, label=label, color=colours[impl])
            ax.bar_label(bars, [f"{v:.0f}" for v in values], fontsize=7)
        ax.set_xticks(range(len(results)), [f"{r['seqlen'] // 1024}k" for r in results])
        ax.set(xlabel="sequence length", title="forward" if passage == "fwd" else "backward")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("TFLOP/s")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(
        f"{data['env']['gpu']}: {config['dtype']}, causal, head dim {config['head_dim']}, "
        f"{config['heads']} heads, {config['tokens'] // 1024}k tokens per batch"
    )
    fig.tight_layout()
    save(fig, out / "kernel-speed.svg")


def save(fig, path: Path) -> None:
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    matplotlib.rcParams["svg.hashsalt"] = "fa-shim"
    build_time(args.out)
    unit_time_memory(args.out)
    kernel_speed(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
