#!/usr/bin/env python3
"""Attention speed of FlashAttention-3 next to FlashAttention-2 and torch's SDPA (issue 15's table).

bf16, causal, head dim 128, 16 heads, batch x seqlen = 32768 tokens, seqlen 1k / 4k / 16k (all
flags). The implementations, each skipped as "n/a (reason)" when it cannot be imported or fails:
  FA2   flash_attn.flash_attn_func               (the flash-attn wheel)
  SDPA  torch.nn.functional.scaled_dot_product_attention, torch's default backend choice
        (recorded per seqlen from torch._fused_sdp_choice; --sdpa-backend forces one)
  FA3   flash_attn_interface.flash_attn_func     (the flash-attn-3 wheel; v2.8.3 returns out,
        older versions (out, lse): both are handled)
All three run on the same q, k, v of shape (b, s, h, d); SDPA sees (b, h, s, d) views of them,
as transformers passes them. Each call is timed alone with CUDA events after --warmup calls; the
table shows the median of --repeats. Backward is timed as autograd.grad of a fixed output
(retain_graph), i.e. the backward kernels only. FLOPs as upstream's benchmarks count them
(hopper/benchmark_attn.py, benchmarks/benchmark_flash_attention.py): forward 4*b*h*s*s*d, halved
when causal; backward 2.5 x forward. Correctness once per seqlen: the max abs difference of
FA2's and FA3's output (and of dq, dk, dv) against SDPA's on the same inputs.

On the device (H100), with the flash-attn-3 wheel (and optionally flash-attn) installed:

    python bench/fa3_speed.py --json $OUT/fa3_speed.json | tee $OUT/fa3_speed.md

It prints a markdown table to stdout (logs go to stderr) and writes the JSON: the command line,
torch / CUDA / GPU, the versions and files of flash-attn and flash-attn-3, the SDPA backend
used, every time (median, min, all repeats), TF/s and the differences. `--dry-run` prints the
plan and what is importable, without a GPU. Exit status: 0; 2 without a CUDA device.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shlex
import statistics
import sys
import time

from speed import (
    flops,  # bench/speed.py: upstream's count (4*b*h*s*s*d, halved when causal; bwd 2.5x)
)

TOKENS = 32 * 1024
IMPLS = ("fa2", "sdpa", "fa3")
LABEL = {"fa2": "FA2", "sdpa": "SDPA", "fa3": "FA3"}
SDPA_BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "math": "MATH",
}


def log(msg: str) -> None:
    print(f"fa3_speed: {msg}", file=sys.stderr, flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seqlens", default="1024,4096,16384", help="comma-separated")
    p.add_argument("--tokens", type=int, default=TOKENS, help="batch x seqlen (default 32768)")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--no-causal", dest="causal", action="store_false")
    p.add_argument("--forward-only", action="store_true", help="time the forward pass only")
    p.add_argument(
        "--impls", default=",".join(IMPLS), help=f"comma-separated subset of {','.join(IMPLS)}"
    )
    p.add_argument(
        "--sdpa-backend",
        choices=("default", *SDPA_BACKENDS),
        default="default",
        help="default: torch's own choice (what the table compares against)",
    )
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repeats", type=int, default=30, help="timed calls; the median is shown")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    p.add_argument("--dry-run", action="store_true", help="the plan and imports; no GPU needed")
    args = p.parse_args(argv)
    try:
        args.seqlens = [int(s) for s in str(args.seqlens).split(",") if s.strip()]
    except ValueError:
        p.error(f"--seqlens must be integers separated by commas, not {args.seqlens!r}")
    if not args.seqlens:
        p.error("--seqlens is empty")
    for s in args.seqlens:
        if s <= 0 or args.tokens % s:
            p.error(f"seqlen {s} does not divide --tokens {args.tokens}")
    args.impls = [i.strip() for i in str(args.impls).split(",") if i.strip()]
    unknown = [i for i in args.impls if i not in IMPLS]
    if unknown or not args.impls:
        p.error(f"--impls takes a subset of {','.join(IMPLS)}, not {unknown or 'nothing'}")
    if args.repeats < 1 or args.warmup < 0:
        p.error("--repeats must be >= 1 and --warmup >= 0")
    if args.heads < 1 or args.head_dim < 1:
        p.error("--heads and --head-dim must be positive")
    return args


def plan(args) -> list[dict]:
    rows = []
    for s in args.seqlens:
        b = args.tokens // s
        fwd, bwd = flops(b, args.heads, s, args.head_dim, args.causal)
        rows.append(
            {
                "seqlen": s,
                "batch": b,
                "shape": [b, s, args.heads, args.head_dim],
                "fwd_flops": fwd,
                "bwd_flops": bwd,
            }
        )
    return rows


def dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip().rstrip(":")[:300]


def load_impls(args) -> tuple[dict, dict, dict]:
    """name -> fn(q, k, v) returning out, or None; name -> note; name -> module file."""
    fns, notes, files = {}, {}, {}
    for name in args.impls:
        try:
            if name == "fa2":
                import flash_attn
                from flash_attn import flash_attn_func as fa2

                files[name] = flash_attn.__file__

                def fn(q, k, v, _f=fa2):
                    return _f(q, k, v, causal=args.causal)

            elif name == "fa3":
                import flash_attn_interface
                from flash_attn_interface import flash_attn_func as fa3

                files[name] = flash_attn_interface.__file__

                def fn(q, k, v, _f=fa3):
                    out = _f(q, k, v, causal=args.causal)
                    # v2.8.3 returns out; earlier hopper/ versions returned (out, lse)
                    return out[0] if isinstance(out, tuple) else out

            else:
                import torch.nn.functional as F

                files[name] = F.__file__

                def fn(q, k, v, _f=F.scaled_dot_product_attention):
                    t = (x.transpose(1, 2) for x in (q, k, v))
                    return _f(*t, is_causal=args.causal).transpose(1, 2)

        except Exception as exc:  # an absent or broken wheel is a row of n/a, not a crash
            fns[name], notes[name] = None, f"not importable ({_why(exc)})"
            continue
        fns[name], notes[name] = fn, ""
    return fns, notes, files


def sdpa_choice(q, k, v, causal: bool) -> str:
    """The backend torch's default dispatch picks for these inputs (what F.sdpa runs)."""
    import torch
    from torch.nn.attention import SDPBackend

    names = {int(m.value): n for n, m in SDPBackend.__members__.items()}
    try:
        t = [x.transpose(1, 2) for x in (q, k, v)]
        return names.get(int(torch._fused_sdp_choice(*t, is_causal=causal)), "?")
    except Exception as exc:  # private API: record why rather than fail the benchmark
        return f"unknown ({_why(exc)})"


def time_ms(fn, warmup: int, repeats: int) -> list[float]:
    """Milliseconds of each of `repeats` calls, each bracketed by its own CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ev = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(repeats)
    ]
    for start, end in ev:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in ev]


def _stats(ms: list[float], flop: float) -> dict:
    med = statistics.median(ms)
    return {"ms": med, "min_ms": min(ms), "all_ms": ms, "tflops": flop / med / 1e9}


def measure(args, fns: dict, notes: dict, row: dict) -> dict:
    import torch

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.manual_seed(args.seed)
    b, s, h, d = row["shape"]
    backward = not args.forward_only
    q, k, v = (
        torch.randn(b, s, h, d, device="cuda", dtype=dtype, requires_grad=backward)
        for _ in range(3)
    )
    dout = torch.randn(b, s, h, d, device="cuda", dtype=dtype)
    result = dict(row)
    if "sdpa" in fns:
        result["sdpa_backend"] = (
            sdpa_choice(q, k, v, args.causal)
            if args.sdpa_backend == "default"
            else SDPA_BACKENDS[args.sdpa_backend] + " (forced)"
        )
    outputs = {}
    for name, fn in fns.items():
        entry = result[name] = {}
        if fn is None:
            entry["na"] = notes[name]
            continue
        fwd = (lambda fn=fn: fn(q, k, v)) if name != "sdpa" else _sdpa_call(args, fn, q, k, v)
        try:
            with torch.no_grad():
                entry["fwd"] = _stats(time_ms(fwd, args.warmup, args.repeats), row["fwd_flops"])
            out = fwd()
            grads = None
            if backward:

                def bwd(out=out):
                    return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

                entry["bwd"] = _stats(time_ms(bwd, args.warmup, args.repeats), row["bwd_flops"])
                grads = bwd()
            outputs[name] = (out.detach(), grads)
            del out
        except Exception as exc:  # e.g. a kernel set without this case, or out of memory
            entry["na"] = f"failed ({_why(exc)})"
            log(f"seqlen {s}: {LABEL[name]} {entry['na']}")
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    ref = outputs.get("sdpa")
    for name, (out, grads) in outputs.items():
        if name == "sdpa" or ref is None:
            continue
        diff = {"out": (out.float() - ref[0].float()).abs().max().item()}
        if grads is not None and ref[1] is not None:
            for key, g, r in zip(("dq", "dk", "dv"), grads, ref[1]):
                diff[key] = (g.float() - r.float()).abs().max().item()
        result[name]["max_abs_diff_vs_sdpa"] = diff
    del outputs, ref
    torch.cuda.empty_cache()
    return result


def _sdpa_call(args, fn, q, k, v):
    if args.sdpa_backend == "default":
        return lambda: fn(q, k, v)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, SDPA_BACKENDS[args.sdpa_backend])

    def call():
        with sdpa_kernel([backend]):
            return fn(q, k, v)

    return call


def _cell(entry: dict, phase: str) -> str:
    if phase in entry:
        return f"{entry[phase]['tflops']:.0f}"
    return "n/a" if "na" in entry else "-"


def markdown(args, results: list[dict], env: dict) -> str:
    phases = ("fwd",) if args.forward_only else ("fwd", "bwd")
    unit = " / ".join(phases)
    title = (
        f"{args.dtype}, {'causal' if args.causal else 'non-causal'}, head dim {args.head_dim}, "
        f"{args.heads} heads, batch x seqlen = {args.tokens}; TF/s ({unit}), median of "
        f"{args.repeats} after {args.warmup} warm-up calls"
    )
    lines = [
        title,
        "",
        f"{env['gpu']}, torch {env['torch']} (CUDA {env['torch_cuda']}), "
        f"flash-attn {env['versions']['flash-attn'] or 'not installed'}, flash-attn-3 "
        f"{env['versions']['flash-attn-3'] or 'not installed'}",
        "",
        "| L | batch | "
        + " | ".join(f"{LABEL[n]} {unit}" for n in args.impls)
        + (" | SDPA backend" if "sdpa" in args.impls else "")
        + " |",
        "|---|---|" + "---|" * (len(args.impls) + ("sdpa" in args.impls)),
    ]
    for r in results:
        cells = [str(r["seqlen"]), str(r["batch"])]
        cells += [" / ".join(_cell(r[n], p) for p in phases) for n in args.impls]
        if "sdpa" in args.impls:
            cells.append(r.get("sdpa_backend", "-"))
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    for r in results:
        for n in args.impls:
            if "na" in r[n]:
                notes.append(f"- L={r['seqlen']}: {LABEL[n]} n/a: {r[n]['na']}")
            diff = r[n].get("max_abs_diff_vs_sdpa")
            if diff:
                shown = ", ".join(f"{k} {v:.2e}" for k, v in diff.items())
                notes.append(f"- L={r['seqlen']}: {LABEL[n]} max abs diff vs SDPA: {shown}")
    if "fa3" in args.impls and "sdpa" in args.impls:
        for r in results:
            fa3, sdpa = r["fa3"], r["sdpa"]
            ratios = [
                f"{p} {fa3[p]['tflops'] / sdpa[p]['tflops']:.2f}x"
                for p in phases
                if p in fa3 and p in sdpa
            ]
            if ratios:
                notes.append(f"- L={r['seqlen']}: FA3 / SDPA: {', '.join(ratios)}")
    return "\n".join(lines + (["", *notes] if notes else [])) + "\n"


def environment(files: dict) -> dict:
    import platform

    import torch

    cuda = torch.cuda.is_available()
    return {
        "command": shlex.join([sys.executable, *sys.argv]),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "capability": list(torch.cuda.get_device_capability(0)) if cuda else None,
        "versions": {d: dist_version(d) for d in ("flash-attn", "flash-attn-3", "torch")},
        "module_files": files,
    }


def write_json(path: str | None, doc: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        log(f"wrote {path}")


def main(argv=None) -> int:
    args = parse_args(argv)
    rows = plan(args)
    import torch

    fns, notes, files = load_impls(args)
    env = environment(files)
    config = {k: v for k, v in vars(args).items() if k not in ("json", "dry_run")}
    if args.dry_run:
        for r in rows:
            print(
                f"L {r['seqlen']:>6}: q/k/v {tuple(r['shape'])}, forward "
                f"{r['fwd_flops'] / 1e12:.2f} TFLOP, backward {r['bwd_flops'] / 1e12:.2f} TFLOP"
            )
        for n in args.impls:
            print(f"{LABEL[n]}: {notes[n] or 'importable from ' + files[n]}")
        return 0
    if not torch.cuda.is_available():
        why = (
            f"no CUDA device visible (torch {torch.__version__}, built with CUDA "
            f"{torch.version.cuda}): this benchmark needs an NVIDIA GPU (--dry-run shows the plan)"
        )
        log(why)
        write_json(args.json, {"config": config, "env": env, "error": why})
        return 2
    log(
        f"{env['gpu']}, torch {env['torch']}; " + ", ".join(f"{n}: {notes[n] or 'ok'}" for n in fns)
    )
    start = time.monotonic()
    results = []
    for r in rows:
        log(f"L {r['seqlen']} (batch {r['batch']})")
        results.append(measure(args, fns, notes, r))
    table = markdown(args, results, env)
    print(table)
    write_json(
        args.json,
        {"config": config, "env": env, "results": results, "seconds": time.monotonic() - start},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
