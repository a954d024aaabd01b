"""What a tailored FA3 does with what it left out (GPU): every left-out feature must raise.

Run against an installed flash-attn-3 built with head dim 128 and bf16, every FA3 feature off
(bench/fa3_device.sh's tailored set). Each case calls flash_attn_interface the way a user
would; the JSON printed says, per case, whether it raised and with what, or ran (with its
largest difference from torch's SDPA, relative to SDPA's largest value, where SDPA computes the
same thing: the output, or the gradient of q for backward).

    python bench/fa3_refusals.py                     # the fwd + bwd set
    python bench/fa3_refusals.py --forward-only      # a -C forward-only=true build

Exit status 1 when a left-out case ran, or a compiled one raised or differs by over 2 %.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F

B, L, H, D = 2, 256, 4, 128


def _qkv(d=D, dtype=torch.bfloat16, h_kv=H, grad=False):
    g = torch.Generator(device="cuda").manual_seed(0)
    shape = lambda h: (B, L, h, d)  # noqa: E731
    q = torch.randn(shape(H), device="cuda", dtype=torch.float32, generator=g)
    k, v = (torch.randn(shape(h_kv), device="cuda", generator=g) for _ in range(2))
    return [t.to(dtype).requires_grad_(grad) for t in (q, k, v)]


def _out(result):
    return result[0] if isinstance(result, tuple) else result


def _sdpa(q, k, v, causal=True):
    t = lambda x: x.transpose(1, 2)  # noqa: E731
    rep = q.shape[2] // k.shape[2]
    k, v = (x.repeat_interleave(rep, dim=2) for x in (k, v))
    return t(F.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=causal))


def cases(fa3, forward_only: bool):
    """name -> (call returning (out, reference) or raising, the refusal(s) expected or None)."""

    def dense(**kw):
        d, dtype = kw.pop("d", D), kw.pop("dtype", torch.bfloat16)
        q, k, v = _qkv(d, dtype, kw.pop("h_kv", H))
        out = _out(fa3.flash_attn_func(q, k, v, causal=True, **kw))
        ref = _sdpa(q, k, v) if dtype in (torch.bfloat16, torch.float16) else None
        return out, ref

    def backward():
        q, k, v = _qkv(grad=True)
        _out(fa3.flash_attn_func(q, k, v, causal=True)).float().square().sum().backward()
        got = q.grad.clone()
        q.grad = None
        _sdpa(q, k, v).float().square().sum().backward()
        return got, q.grad

    def varlen():
        q, k, v = (t.reshape(B * L, H, D) for t in _qkv())
        cu = torch.arange(0, (B + 1) * L, L, device="cuda", dtype=torch.int32)
        return _out(fa3.flash_attn_varlen_func(q, k, v, cu, cu, L, L, causal=True)), None

    def kvcache(**kw):
        q, k, v = _qkv()
        return _out(fa3.flash_attn_with_kvcache(q[:, -1:], k, v, causal=True, **kw)), None

    def paged():
        q, k, v = _qkv()
        pages = torch.arange(B * L // 64, device="cuda", dtype=torch.int32).reshape(B, -1)
        kp, vp = (t.reshape(B * L // 64, 64, H, D) for t in (k, v))
        seqlens = torch.full((B,), L, device="cuda", dtype=torch.int32)
        out = fa3.flash_attn_with_kvcache(
            q[:, -1:], kp, vp, cache_seqlens=seqlens, page_table=pages, causal=True
        )
        return _out(out), None

    def appendkv():
        new = torch.randn(B, 1, H, D, device="cuda", dtype=torch.bfloat16)
        seqlens = torch.full((B,), L - 1, device="cuda", dtype=torch.int32)
        return kvcache(k=new, v=new, cache_seqlens=seqlens)

    refuse = "This flash attention build does not support"
    # flash_attn_with_kvcache with cache_seqlens is varlen to upstream (seqused_k): with varlen
    # left out too, paged KV and appending KV meet the varlen refusal first
    kv_refusal = (f"{refuse} varlen", f"{refuse} paged KV", f"{refuse} appending KV")
    return {
        "compiled: bf16, head dim 128, causal": (dense, None),
        "compiled: head dim 64 (runs on the head dim 128 kernels)": (lambda: dense(d=64), None),
        "backward": (backward, f"{refuse} backward" if forward_only else None),
        "fp16": (lambda: dense(dtype=torch.float16), f"{refuse} FP16"),
        "fp8 (e4m3)": (lambda: dense(dtype=torch.float8_e4m3fn), f"{refuse} FP8"),
        # upstream's own bound, from the compiled head dims (fa-shim's 06 patch backs it up)
        "head dim 256 (above the compiled ones)": (
            lambda: dense(d=256),
            "FlashAttention forward only supports head dimension at most 128",
        ),
        "varlen": (varlen, f"{refuse} varlen"),
        "local (window_size)": (lambda: dense(window_size=(64, 0)), f"{refuse} local"),
        "softcap": (lambda: dense(softcap=30.0), f"{refuse} tanh softcapping"),
        "split (num_splits=2)": (lambda: dense(num_splits=2), f"{refuse} splits"),
        "packgqa (4 q heads on 1 kv head)": (
            lambda: dense(h_kv=1, pack_gqa=True),
            f"{refuse} pack_gqa",
        ),
        "paged-kv (page_table)": (paged, kv_refusal),
        "appendkv (k, v given)": (appendkv, kv_refusal),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forward-only", action="store_true")
    args = parser.parse_args()
    import flash_attn_interface as fa3

    report, bad = {}, []
    for name, (call, refusal) in cases(fa3, args.forward_only).items():
        try:
            out, ref = call()
            torch.cuda.synchronize()
        except Exception as exc:  # what the user would see
            message = str(exc).splitlines()[0][:200]
            report[name] = {"raised": type(exc).__name__, "message": message}
            if refusal is None or not message.startswith(refusal):
                bad.append(name)
            continue
        # relative to the largest value of SDPA's result (bf16 keeps about 3 digits)
        rel = None if ref is None else ((out.float() - ref.float()).abs().max() / ref.abs().max())
        report[name] = {"ran": True, "max_diff_vs_sdpa_rel": None if rel is None else rel.item()}
        if refusal is not None or (rel is not None and rel.item() > 2e-2):
            bad.append(name)
    json.dump(
        {"forward_only": args.forward_only, "cases": report, "bad": bad}, sys.stdout, indent=1
    )
    print()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
