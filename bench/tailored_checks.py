#!/usr/bin/env python3
"""Direct checks of a tailored flash-attn wheel (default: head dim 128, bf16, forward only).

Upstream's tests hardly cover such a set: all but one of them run a backward pass, and the one
that does not (kvcache) is fp16-only. So, on the GPU, with the installed flash_attn:

included (must run and match a float64 reference within --max-rel-err, |x - ref|_F / |ref|_F):
  flash_attn_func causal and not, seqlen_q != seqlen_k, GQA, head dim 111 (padded to 112, served
  by the hdim128 kernels), flash_attn_varlen_func, flash_attn_with_kvcache with split-KV
  (num_splits 0 and 4), paged KV and new keys appended to the cache;
excluded (must raise fa-shim's RuntimeError, checked word for word): the backward pass, fp16,
  head dim 64, head dim 40 (the hdim64 kernels), fp16 in flash_attn_with_kvcache.

    tailored_checks.py [--json out.json]      exit status 1 if any check fails
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import traceback

KERNEL_SET = "hdim128.bf16.fwd"
PREFIX = "flash-attn was built by fa-shim without "
MESSAGES = {
    "backward": f"{PREFIX}the backward pass (kernel set {KERNEL_SET}); rebuild it without "
    "-C forward-only for training.",
    "fp16": f"{PREFIX}dtype fp16 (kernel set {KERNEL_SET}); rebuild it without -C dtypes (both "
    "fp16 and bf16) or with -C dtypes=fp16.",
    "hdim64": f"{PREFIX}head dim 64 (kernel set {KERNEL_SET}); rebuild it with -C "
    "head-dims=64,128 (or without head-dims, for all head dims).",
    "hdim40": f"{PREFIX}the head dim 64 kernels, which serve head dim 40 (kernel set "
    f"{KERNEL_SET}); rebuild it with -C head-dims=64,128 (or without head-dims, for all head "
    "dims).",
}


def reference(q, k, v, causal, cache_seqlens=None):
    """float64 attention; q (b, sq, h, d), k/v (b, sk, hk, d); causal aligned bottom-right."""
    import torch

    q, k, v = (t.double() for t in (q, k, v))
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    k = k.repeat_interleave(h // hk, dim=2)
    v = v.repeat_interleave(h // hk, dim=2)
    scores = torch.einsum("bshd,bthd->bhst", q, k) / math.sqrt(d)
    lengths = (
        torch.full((b,), sk, device=q.device) if cache_seqlens is None else cache_seqlens.long()
    )
    cols = torch.arange(sk, device=q.device)
    rows = torch.arange(sq, device=q.device)
    mask = cols[None, None, :] >= lengths[:, None, None]  # (b, 1, sk) beyond each cache
    mask = mask.expand(b, sq, sk)
    if causal:  # query i sees keys up to i + (length - sq)
        limit = rows[None, :, None] + (lengths[:, None, None] - sq)
        mask = mask | (cols[None, None, :] > limit)
    scores = scores.masked_fill(mask[:, None], float("-inf"))
    return torch.einsum("bhst,bthd->bshd", scores.softmax(-1), v)


def rel(x, ref) -> float:
    return ((x.double() - ref).norm() / ref.norm()).item()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--max-rel-err", type=float, default=1e-2)
    args = parser.parse_args(argv)

    import torch
    from flash_attn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

    torch.manual_seed(0)
    dev, bf16 = "cuda", torch.bfloat16
    results = []

    def record(name, ok, detail):
        results.append({"check": name, "ok": bool(ok), "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)

    def included(name, fn):
        try:
            err = fn()
        except Exception as exc:
            record(name, False, f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
            return
        record(name, err <= args.max_rel_err, f"rel. error {err:.2e}")

    def excluded(name, key, fn):
        try:
            fn()
            torch.cuda.synchronize()
        except RuntimeError as exc:
            ok = MESSAGES[key] in str(exc)
            record(name, ok, "raised fa-shim's error" if ok else f"other error: {exc}"[:400])
        except Exception as exc:
            record(name, False, f"{type(exc).__name__}: {exc}"[:400])
        else:
            record(name, False, "no error: a left-out kernel ran?")

    def rnd(*shape, dtype=bf16):
        return torch.randn(*shape, device=dev, dtype=dtype)

    # ------------------------------------------------------------------------------ included
    for causal in (False, True):

        def fwd(causal=causal):
            q, k, v = rnd(2, 1000, 8, 128), rnd(2, 1000, 8, 128), rnd(2, 1000, 8, 128)
            return rel(flash_attn_func(q, k, v, causal=causal), reference(q, k, v, causal))

        included(f"flash_attn_func bf16 d128 causal={causal}", fwd)

    def cross():
        q, k, v = rnd(3, 200, 8, 128), rnd(3, 777, 8, 128), rnd(3, 777, 8, 128)
        return rel(flash_attn_func(q, k, v, causal=True), reference(q, k, v, True))

    included("flash_attn_func bf16 d128 seqlen_q 200 < seqlen_k 777 causal", cross)

    def gqa():
        q, k, v = rnd(2, 512, 16, 128), rnd(2, 512, 4, 128), rnd(2, 512, 4, 128)
        return rel(flash_attn_func(q, k, v, causal=True), reference(q, k, v, True))

    included("flash_attn_func bf16 d128 GQA 16/4 heads causal", gqa)

    def d111():
        q, k, v = rnd(2, 333, 4, 111), rnd(2, 333, 4, 111), rnd(2, 333, 4, 111)
        return rel(flash_attn_func(q, k, v), reference(q, k, v, False))

    included("flash_attn_func bf16 head dim 111 (hdim128 kernels)", d111)

    def varlen():
        lengths = [100, 513, 1024]
        cu = torch.tensor([0, *itertools.accumulate(lengths)], device=dev, dtype=torch.int32)
        total = sum(lengths)
        q, k, v = rnd(total, 8, 128), rnd(total, 8, 128), rnd(total, 8, 128)
        out = flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths), causal=True)
        errs = []
        for i in range(len(lengths)):
            s = slice(int(cu[i]), int(cu[i + 1]))
            ref = reference(q[None, s], k[None, s], v[None, s], True)[0]
            errs.append(rel(out[s], ref))
        return max(errs)

    included("flash_attn_varlen_func bf16 d128 causal, 3 sequences", varlen)

    for splits in (0, 4):

        def kvcache(splits=splits):
            b, sk, hk, h = 4, 4096, 4, 16
            k_cache, v_cache = rnd(b, sk, hk, 128), rnd(b, sk, hk, 128)
            seqlens = torch.tensor([1, 1000, 2500, 4096], device=dev, dtype=torch.int32)
            q = rnd(b, 1, h, 128)
            out = flash_attn_with_kvcache(
                q, k_cache, v_cache, cache_seqlens=seqlens, causal=True, num_splits=splits
            )
            return rel(out, reference(q, k_cache, v_cache, True, seqlens))

        included(f"flash_attn_with_kvcache bf16 d128 decode num_splits={splits}", kvcache)

    def paged_append():
        b, h, page, pages_per_seq = 2, 8, 256, 8
        sk = page * pages_per_seq
        n_pages = b * pages_per_seq
        k_pages, v_pages = rnd(n_pages, page, h, 128), rnd(n_pages, page, h, 128)
        table = torch.randperm(n_pages, device=dev, dtype=torch.int32).view(b, pages_per_seq)
        seqlens = torch.tensor([700, 1500], device=dev, dtype=torch.int32)
        q, k_new, v_new = rnd(b, 16, h, 128), rnd(b, 16, h, 128), rnd(b, 16, h, 128)
        # the cache as one (b, sk, h, d) tensor, for the reference, before and after the append
        k_flat = k_pages[table.long()].reshape(b, sk, h, 128).clone()
        v_flat = v_pages[table.long()].reshape(b, sk, h, 128).clone()
        out = flash_attn_with_kvcache(
            q,
            k_pages,
            v_pages,
            k_new,
            v_new,
            cache_seqlens=seqlens,
            block_table=table,
            causal=True,
        )
        for i in range(b):
            n = int(seqlens[i])
            k_flat[i, n : n + 16], v_flat[i, n : n + 16] = k_new[i], v_new[i]
        return rel(out, reference(q, k_flat, v_flat, True, seqlens + 16))

    included("flash_attn_with_kvcache bf16 d128 paged (256) + appended keys", paged_append)

    # ------------------------------------------------------------------------------ excluded
    def backward():
        q, k, v = (rnd(1, 256, 4, 128).requires_grad_() for _ in range(3))
        flash_attn_func(q, k, v, causal=True).sum().backward()

    excluded("backward pass (flash_attn_func + .backward())", "backward", backward)
    fp16 = torch.float16
    excluded(
        "fp16 forward",
        "fp16",
        lambda: flash_attn_func(*(rnd(1, 256, 4, 128, dtype=fp16) for _ in range(3))),
    )
    excluded(
        "head dim 64 forward (bf16)",
        "hdim64",
        lambda: flash_attn_func(*(rnd(1, 256, 4, 64) for _ in range(3))),
    )
    excluded(
        "head dim 40 forward (bf16)",
        "hdim40",
        lambda: flash_attn_func(*(rnd(1, 256, 4, 40) for _ in range(3))),
    )
    excluded(
        "fp16 flash_attn_with_kvcache",
        "fp16",
        lambda: flash_attn_with_kvcache(
            rnd(2, 1, 8, 128, dtype=fp16),
            rnd(2, 1024, 8, 128, dtype=fp16),
            rnd(2, 1024, 8, 128, dtype=fp16),
            cache_seqlens=torch.tensor([10, 1000], device=dev, dtype=torch.int32),
        ),
    )
    # after all those errors the module still works
    included("flash_attn_func bf16 d128 again, after the errors", lambda: cross())

    failed = [r for r in results if not r["ok"]]
    print(f"\n{len(results) - len(failed)} of {len(results)} tailored checks passed")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"kernel_set": KERNEL_SET, "results": results}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)
