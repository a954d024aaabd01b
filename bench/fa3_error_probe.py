#!/usr/bin/env python3
"""How the installed FA3 reports an error it raises itself (GPU): float32 inputs, which every
build refuses ("FlashAttention only supports fp16, bf16..."), through the interface's own
function outside torch.library's wrappers (`raw`) and through flash_attn_func (`func`), each
in a process of its own (a crash names the path it was on).

    python bench/fa3_error_probe.py raw|func
"""

from __future__ import annotations

import faulthandler
import sys

import torch


def main() -> None:
    faulthandler.enable()
    import flash_attn_interface as fa3

    q = torch.randn(1, 128, 2, 128, device="cuda", dtype=torch.float32)
    print(f"calling through {sys.argv[1]}", file=sys.stderr, flush=True)
    try:
        if sys.argv[1] == "raw":  # the interface's own function, none of torch.library's wrappers
            fa3._flash_attn_forward._init_fn(q, q, q, causal=True)
        else:
            fa3.flash_attn_func(q, q, q, causal=True)
        torch.cuda.synchronize()
        print("no error raised")
    except Exception as exc:
        print(f"raised {type(exc).__name__}: {str(exc)[:300]}")


if __name__ == "__main__":
    main()
