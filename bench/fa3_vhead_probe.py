#!/usr/bin/env python3
"""Q/K head dim 64 with V head dim 256 on the installed FA3 (GPU), against SDPA: what a set
without the hdim64_256 kernels does with it. At main-0251105a, fa-shim's 06-headdim-dispatch.patch
should refuse it ("does not support V head dimension"); upstream's dispatch would otherwise run a
kernel whose V head dim is smaller than the tensor's (found by reading the code, issue 23's
groundwork). v2.8.3's dispatch has the same shape and its 06 no such hunk.

    python bench/fa3_vhead_probe.py [--qk 64 --v 256] > vhead.json

Prints JSON: the installed flash-attn-3's version, whether the call raised (and its message) and,
if it ran, the largest difference from SDPA and the share of the output columns left at zero."""

from __future__ import annotations

import argparse
import faulthandler
import importlib.metadata
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qk", type=int, default=64, help="Q and K head dim")
    parser.add_argument("--v", type=int, default=256, help="V head dim")
    parser.add_argument("--dtype", default="bfloat16", help="float32: an error every build raises")
    args = parser.parse_args()
    faulthandler.enable()  # a segmentation fault prints the Python stack it came from
    import flash_attn_interface as fa3

    torch.manual_seed(0)
    b, s, h = 2, 512, 8
    dtype = getattr(torch, args.dtype)
    q = torch.randn(b, s, h, args.qk, device="cuda", dtype=dtype)
    k = torch.randn(b, s, h, args.qk, device="cuda", dtype=dtype)
    v = torch.randn(b, s, h, args.v, device="cuda", dtype=dtype)
    report = {
        "flash_attn_3": importlib.metadata.version("flash-attn-3"),
        "module": fa3.__file__,
        "shapes": {"qk": [b, s, h, args.qk], "v": [b, s, h, args.v]},
    }
    # FA3 first, each step said as it ends: a crash names the step it was in (the first run
    # crashed with nothing printed, SDPA's reference computed first)
    print(json.dumps({"step": "fa3 call"}), file=sys.stderr, flush=True)
    try:
        out = fa3.flash_attn_func(q, k, v, causal=True)
        out = out[0] if isinstance(out, tuple) else out
        torch.cuda.synchronize()
    except Exception as exc:  # what the user would see
        report.update(raised=True, error=f"{type(exc).__name__}: {exc}"[:500])
    else:
        print(json.dumps({"step": "sdpa reference (math backend)"}), file=sys.stderr, flush=True)
        with sdpa_kernel(SDPBackend.MATH):  # no fused kernel's own limits on V != Q/K head dims
            ref = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            ).transpose(1, 2)
        zero_columns = (out.float().abs().amax(dim=(0, 1, 2)) == 0).float().mean().item()
        report.update(
            raised=False,
            max_abs_diff_vs_sdpa=(out.float() - ref.float()).abs().max().item(),
            zero_output_columns=zero_columns,
        )
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
