#!/usr/bin/env python3
"""Forward and backward speed of the installed flash-attn next to torch SDPA, with accuracy.

The configuration of the acceptance table: bf16, head dim 128, causal, 16 heads, batch x seqlen
= 32k tokens, seqlen 1k / 4k / 16k. FlashAttention and SDPA run on the same q, k, v (SDPA
through a (b, h, s, d) view of them). Times come from CUDA events around each call after warm-up;
the table reports the mean of `--iters` calls. FLOPs of causal attention: forward
4*b*h*s*s*d/2, backward 2.5x the forward.

Accuracy against a float64 reference of the same inputs, computed for a slice (batch 0, the first
`--ref-heads` heads; attention is independent per batch and head, so the slice is exact):
forward: |out - ref|_F / |ref|_F; backward: the largest of that for dq, dk, dv (a fixed random
dout). bf16 must stay within --max-rel-err (1e-2).

    speed.py --out speed.json [--forward-only] [--seqlens 1024,4096,16384] [--iters 20]
    speed.py --dry-run        the plan (shapes, FLOPs), no GPU needed

Exit status 1 if an error bound is exceeded (the table is written first).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

TOKENS = 32 * 1024


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
    p.add_argument("--forward-only", action="store_true", help="a forward-only kernel set")
    p.add_argument("--no-sdpa", dest="sdpa", action="store_false")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--ref-heads", type=int, default=2, help="heads in the float64 reference")
    p.add_argument("--max-rel-err", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--markdown", help="write the table as markdown here")
    p.add_argument("--label", default="", help="named in the table (e.g. full, tailored)")
    p.add_argument("--dry-run", action="store_true", help="print the plan; needs no GPU")
    args = p.parse_args(argv)
    try:
        args.seqlens = [int(s) for s in str(args.seqlens).split(",") if s.strip()]
    except ValueError:
        p.error(f"--seqlens must be integers separated by commas, not {args.seqlens!r}")
    for s in args.seqlens:
        if s <= 0 or args.tokens % s:
            p.error(f"seqlen {s} does not divide --tokens {args.tokens}")
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    if not 1 <= args.ref_heads <= args.heads:
        p.error("--ref-heads must be between 1 and --heads")
    return args


def flops(batch: int, heads: int, seqlen: int, head_dim: int, causal: bool) -> tuple[float, float]:
    fwd = 4 * batch * heads * seqlen * seqlen * head_dim / (2 if causal else 1)
    return fwd, 2.5 * fwd


def plan(args) -> list[dict]:
    rows = []
    for s in args.seqlens:
        b = args.tokens // s
        f, bw = flops(b, args.heads, s, args.head_dim, args.causal)
        rows.append(
            {
                "seqlen": s,
                "batch": b,
                "heads": args.heads,
                "head_dim": args.head_dim,
                "shape": [b, s, args.heads, args.head_dim],
                "fwd_flops": f,
                "bwd_flops": bw,
            }
        )
    return rows


def _time(fn, warmup: int, iters: int) -> float:
    """Mean milliseconds of fn() over iters calls, each bracketed by CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return sum(s.elapsed_time(e) for s, e in zip(starts, ends)) / iters


def _rel(x, ref) -> float:
    return ((x.double() - ref).norm() / ref.norm()).item()


def _reference(q, k, v, dout, causal: bool, backward: bool):
    """float64 attention of (1, s, h, d) slices; returns out and (dq, dk, dv) or None."""
    import torch

    q, k, v = (t.detach().double().requires_grad_(backward) for t in (q, k, v))
    s, d = q.shape[1], q.shape[-1]
    scores = torch.einsum("bshd,bthd->bhst", q, k) / math.sqrt(d)
    if causal:
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    out = torch.einsum("bhst,bthd->bshd", scores.softmax(-1), v)
    grads = None
    if backward:
        grads = torch.autograd.grad(out, (q, k, v), dout.double())
    return out.detach(), grads


def measure(args, row: dict) -> dict:
    import torch
    import torch.nn.functional as F
    from flash_attn import flash_attn_func

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

    def fa_fwd():
        return flash_attn_func(q, k, v, causal=args.causal)

    def sdpa_fwd():  # the same tensors, seen as (b, h, s, d)
        return F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=args.causal
        ).transpose(1, 2)

    impls = {"flash_attn": fa_fwd}
    if args.sdpa:
        impls["sdpa"] = sdpa_fwd
    outputs = {}
    for name, fwd in impls.items():
        with torch.no_grad():
            ms = _time(fwd, args.warmup, args.iters)
        result[f"{name}_fwd_ms"] = ms
        result[f"{name}_fwd_tflops"] = row["fwd_flops"] / ms / 1e9
        if backward:
            out = fwd()
            outputs[name] = out

            def bwd(out=out):
                return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

            ms = _time(bwd, args.warmup, args.iters)
            result[f"{name}_bwd_ms"] = ms
            result[f"{name}_bwd_tflops"] = row["bwd_flops"] / ms / 1e9
            grads = bwd()
            outputs[name] = (out.detach(), grads)
            del out
        else:
            with torch.no_grad():
                outputs[name] = (fwd(), None)
        torch.cuda.synchronize()

    # Accuracy on a slice: batch 0, the first ref_heads heads.
    hs = slice(0, args.ref_heads)
    ref_out, ref_grads = _reference(
        q[:1, :, hs], k[:1, :, hs], v[:1, :, hs], dout[:1, :, hs], args.causal, backward
    )
    for name, (out, grads) in outputs.items():
        result[f"{name}_fwd_rel_err"] = _rel(out[:1, :, hs], ref_out)
        if grads is not None:
            result[f"{name}_bwd_rel_err"] = max(
                _rel(g[:1, :, hs], r) for g, r in zip(grads, ref_grads)
            )
    del outputs, ref_out, ref_grads
    torch.cuda.empty_cache()
    return result


def markdown(args, results: list[dict], env: dict) -> str:
    title = f"Speed{(' (' + args.label + ')') if args.label else ''}: {args.dtype}, head dim "
    title += f"{args.head_dim}, {'causal' if args.causal else 'non-causal'}, {args.heads} heads, "
    title += f"batch x seqlen = {args.tokens}, mean of {args.iters} after {args.warmup} warm-up"
    lines = [
        title,
        "",
        f"{env.get('gpu')}, torch {env.get('torch')}, flash-attn {env.get('flash_attn')}",
        "",
    ]
    cols = ["seqlen", "batch", "FA fwd TFLOP/s", "SDPA fwd TFLOP/s"]
    if not args.forward_only:
        cols += ["FA bwd TFLOP/s", "SDPA bwd TFLOP/s"]
    cols += ["FA fwd rel err", "SDPA fwd rel err"]
    if not args.forward_only:
        cols += ["FA bwd rel err", "SDPA bwd rel err"]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]

    def f(r, key, fmt):
        return format(r[key], fmt) if key in r else "-"

    for r in results:
        cells = [
            str(r["seqlen"]),
            str(r["batch"]),
            f(r, "flash_attn_fwd_tflops", ".0f"),
            f(r, "sdpa_fwd_tflops", ".0f"),
        ]
        if not args.forward_only:
            cells += [f(r, "flash_attn_bwd_tflops", ".0f"), f(r, "sdpa_bwd_tflops", ".0f")]
        cells += [f(r, "flash_attn_fwd_rel_err", ".2e"), f(r, "sdpa_fwd_rel_err", ".2e")]
        if not args.forward_only:
            cells += [f(r, "flash_attn_bwd_rel_err", ".2e"), f(r, "sdpa_bwd_rel_err", ".2e")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    rows = plan(args)
    if args.dry_run:
        for r in rows:
            print(
                f"seqlen {r['seqlen']:>6}: q/k/v {tuple(r['shape'])}, forward "
                f"{r['fwd_flops'] / 1e12:.2f} TFLOP, backward {r['bwd_flops'] / 1e12:.2f} TFLOP"
                + ("" if not args.forward_only else " (not run: forward only)")
            )
        return 0
    import torch

    if not torch.cuda.is_available():
        print("speed.py: no CUDA GPU visible (use --dry-run to see the plan)", file=sys.stderr)
        return 2
    import flash_attn

    env = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "flash_attn": getattr(flash_attn, "__version__", "?"),
        "flash_attn_file": flash_attn.__file__,
    }
    start = time.monotonic()
    results = [measure(args, r) for r in rows]
    bad = []
    for r in results:
        for key, value in r.items():
            if (
                key.startswith("flash_attn_")
                and key.endswith("_rel_err")
                and value > args.max_rel_err
            ):
                bad.append(f"seqlen {r['seqlen']}: {key} = {value:.3e} > {args.max_rel_err}")
    table = markdown(args, results, env)
    print(table)
    doc = {
        "config": {k: v for k, v in vars(args).items() if k not in ("out", "markdown")},
        "env": env,
        "results": results,
        "seconds": time.monotonic() - start,
        "errors_within_bound": not bad,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if bad:
        print("rel. error above the bound:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
