#!/usr/bin/env python3
"""The FlashAttention-2 stable-ABI wheel (-C torch-abi=stable) against the per-torch wheel of
the same kernel set, bit for bit, on a GPU (docs/guides/stable-abi.md).

    fa2_stable_ab.py dump OUT.pt [--head-dim 32]   in each wheel's environment: the calls below
                                                   from one seed, their outputs and the CUDA
                                                   generator's offset after each, saved
    fa2_stable_ab.py compare A.pt B.pt             equal bit for bit? (exit status 1 if not)
    fa2_stable_ab.py graphs                        CUDA graph capture: without dropout it
                                                   captures and replays; with dropout the
                                                   stable wheel raises its RuntimeError

The calls (bf16): flash_attn_func with dropout 0.17 (causal, return_attn_probs: the dropout
mask) and its backward; flash_attn_varlen_func with dropout 0.17 (3 sequences) and its backward
(both deterministic=True: else dq is summed with atomics in an order that differs run to run);
flash_attn_qkvpacked_func without dropout; flash_attn_with_kvcache (new k/v appended, seqlens
given). Dropout draws its Philox seed and offset from torch's CUDA generator: equal outputs and
equal generator offsets mean the stable wheel takes the same random numbers as upstream's C++.
Then rng(): the seeds and offsets drawn, caught refusals and cuDNN's RNN (its docstring).
"""

from __future__ import annotations

import argparse
import sys


def calls(head_dim: int) -> dict:
    import torch
    from flash_attn import (
        flash_attn_func,
        flash_attn_qkvpacked_func,
        flash_attn_varlen_func,
        flash_attn_with_kvcache,
    )

    dev, bf16 = "cuda", torch.bfloat16
    torch.cuda.init()  # default_generators is empty before
    gen = torch.cuda.default_generators[0]
    torch.manual_seed(1234)
    out = {}

    def rand(*shape):
        return torch.randn(*shape, device=dev, dtype=bf16, requires_grad=True)

    q, k, v = rand(4, 512, 8, head_dim), rand(4, 512, 2, head_dim), rand(4, 512, 2, head_dim)
    # deterministic: dq is otherwise summed with atomics, in an order no two runs share
    o, lse, s = flash_attn_func(
        q, k, v, 0.17, causal=True, deterministic=True, return_attn_probs=True
    )
    out["dense.offset"] = torch.tensor(gen.get_offset())
    o.backward(torch.randn_like(o))
    out.update({"dense.out": o, "dense.lse": lse, "dense.S": s, "dense.dq": q.grad,
                "dense.dk": k.grad, "dense.dv": v.grad})  # fmt: skip

    lens = [100, 333, 79]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device=dev, dtype=torch.int32)
    q, k, v = (
        rand(sum(lens), 8, head_dim),
        rand(sum(lens), 8, head_dim),
        rand(sum(lens), 8, head_dim),
    )
    o = flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), 0.17, deterministic=True)
    out["varlen.offset"] = torch.tensor(gen.get_offset())
    o.backward(torch.randn_like(o))
    out.update({"varlen.out": o, "varlen.dq": q.grad, "varlen.dk": k.grad, "varlen.dv": v.grad})

    qkv = rand(2, 256, 3, 4, head_dim)
    out["qkvpacked.out"] = flash_attn_qkvpacked_func(qkv, causal=True)

    with torch.no_grad():
        kc, vc = (
            torch.randn(2, 300, 2, head_dim, device=dev, dtype=bf16),
            torch.randn(2, 300, 2, head_dim, device=dev, dtype=bf16),
        )
        q1 = torch.randn(2, 1, 8, head_dim, device=dev, dtype=bf16)
        kn, vn = (
            torch.randn(2, 1, 2, head_dim, device=dev, dtype=bf16),
            torch.randn(2, 1, 2, head_dim, device=dev, dtype=bf16),
        )
        seqlens = torch.tensor([120, 250], device=dev, dtype=torch.int32)
        out["kvcache.out"] = flash_attn_with_kvcache(
            q1, kc, vc, kn, vn, cache_seqlens=seqlens, causal=True
        )
        out["kvcache.k_cache"] = kc
    out["final.offset"] = torch.tensor(gen.get_offset())
    out.update(rng(head_dim, gen))
    return {n: t.detach().cpu() for n, t in out.items()}


def rng(head_dim: int, gen) -> dict:
    """The Philox state each dropout call draws and the generators after it: the forward's
    rng_state (seed, offset), a call refused by a check before upstream's draw (the generator stays)
    and one refused after it (set_params_alibi's: upstream's moves), a generator passed in, and
    cuDNN's LSTM dropout around a flash-attn dropout call (a cleared re-seed flag re-seeds it)."""
    import torch
    from flash_attn.flash_attn_interface import flash_attn_gpu

    dev, bf16, out = "cuda", torch.bfloat16, {}
    q = torch.randn(3, 128, 4, head_dim, device=dev, dtype=bf16)

    def fwd(k, alibi=None, g=None):
        return flash_attn_gpu.fwd(q, k, k, None, alibi, 0.2, head_dim**-0.5, False, -1, -1, 0.0,
                                  False, g)  # fmt: skip

    def refused(name, k, alibi=None):
        try:
            fwd(k, alibi)
            raised = False
        except RuntimeError as exc:
            print(f"{name}: RuntimeError: {str(exc).splitlines()[0]}", file=sys.stderr)
            raised = True
        out[f"rng.{name}.raised"] = torch.tensor(raised)
        out[f"rng.{name}.offset"] = torch.tensor(gen.get_offset())

    out["rng.seed"] = torch.tensor(gen.initial_seed())
    out["rng.fwd.rng_state"] = fwd(q)[3]
    out["rng.fwd.offset"] = torch.tensor(gen.get_offset())
    refused("before_draw", torch.randn(3, 128, 4, head_dim + 8, device=dev, dtype=bf16))
    refused("after_draw", q, alibi=torch.ones(4, device=dev, dtype=torch.float16))
    mine = torch.Generator(dev)
    mine.manual_seed(99)
    out["rng.gen.rng_state"] = fwd(q, g=mine)[3]
    out["rng.gen.offset"] = torch.tensor(mine.get_offset())
    out["rng.gen.default_offset"] = torch.tensor(gen.get_offset())
    lstm = torch.nn.LSTM(32, 32, num_layers=2, dropout=0.5, device=dev)
    x = torch.randn(5, 3, 32, device=dev)
    out["rng.lstm.first"] = lstm(x)[0]
    fwd(q)
    before = gen.get_offset()
    out["rng.lstm.second"] = lstm(x)[0]  # a re-seeded dropout state: other masks
    out["rng.lstm.draws"] = torch.tensor(gen.get_offset() - before)  # 4 if it re-seeded
    out["rng.lstm.cpu_rng_state"] = torch.get_rng_state()
    out["rng.final.offset"] = torch.tensor(gen.get_offset())
    return out


def dump(args) -> int:
    import flash_attn
    import torch

    results = calls(args.head_dim)
    results["meta"] = {"flash_attn": flash_attn.__version__, "torch": torch.__version__}
    torch.save(results, args.out)
    print(f"{flash_attn.__version__} (torch {torch.__version__}): {len(results) - 1} tensors")
    return 0


def compare(args) -> int:
    import torch

    a, b = (torch.load(p, weights_only=False) for p in (args.a, args.b))
    print(f"A: {a.pop('meta')}\nB: {b.pop('meta')}")
    differ = 0
    for name in a:
        same = a[name].shape == b[name].shape and torch.equal(
            a[name].view(-1).view(torch.uint8) if a[name].is_floating_point() else a[name],
            b[name].view(-1).view(torch.uint8) if b[name].is_floating_point() else b[name],
        )
        differ += not same
        shown = "" if a[name].numel() > 2 else f" = {a[name].tolist()}"
        if shown and not same:
            shown += f" (B: {b[name].tolist()})"
        print(f"{'equal' if same else 'DIFFERENT':9} {name} {tuple(a[name].shape)}{shown}")
    print(f"{len(a) - differ} of {len(a)} equal bit for bit")
    return 1 if differ else 0


def graphs(args) -> int:
    import torch
    from flash_attn import flash_attn_func

    q = torch.randn(2, 256, 4, args.head_dim, device="cuda", dtype=torch.bfloat16)
    eager = flash_attn_func(q, q, q, causal=True)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        flash_attn_func(q, q, q, causal=True)  # warm-up on the side stream, as torch asks
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        captured = flash_attn_func(q, q, q, causal=True)
    graph.replay()
    torch.cuda.synchronize()
    print("no dropout: captured and replayed, equal to eager:", torch.equal(captured, eager))
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            flash_attn_func(q, q, q, 0.1, causal=True)
        print("dropout: captured")
    except RuntimeError as exc:
        print(f"dropout: RuntimeError: {exc}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="verb", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    g = sub.add_parser("graphs")
    for parser in (d, g):
        parser.add_argument("--head-dim", type=int, default=32)
    args = p.parse_args(argv)
    return {"dump": dump, "compare": compare, "graphs": graphs}[args.verb](args)


if __name__ == "__main__":
    sys.exit(main())
