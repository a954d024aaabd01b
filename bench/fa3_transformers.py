"""transformers' attn_implementation="flash_attention_3" (or, with `2`, "flash_attention_2") on
the FlashAttention that fa-shim built (GPU).

A small Llama made from a config (random weights, nothing downloaded: head dim 128, or --head-dim,
bf16, 2 layers) runs twice with the same weights: once on torch's SDPA, once on
flash_attention_3 (2). Printed as JSON: where transformers found the module (flash_attn_interface,
flash_attn: it must be the fa-shim wheel's), the kernels the profiler saw in the flash forward,
and the differences against SDPA in logits, in the gradients of a loss, and in greedy tokens.

    python bench/fa3_transformers.py > fa3-transformers.json
    python bench/fa3_transformers.py 2 --head-dim 32 > fa2-transformers.json

Needs a GPU (Hopper for FA3), transformers and an installed flash-attn-3 (flash-attn) built with
the head dim and bf16.
"""

from __future__ import annotations

import copy
import json
import sys

import torch


def _model(config, implementation: str, state=None):
    from transformers import AutoModelForCausalLM

    # a copy each: the model writes its implementation into the config it is given, and the
    # attention layers read it from there at every call
    model = AutoModelForCausalLM.from_config(
        copy.deepcopy(config), attn_implementation=implementation
    )
    if state is not None:
        model.load_state_dict(state)
    return model.to(device="cuda", dtype=torch.bfloat16)


def _grads(model, ids) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    model(input_ids=ids, labels=ids).loss.backward()
    return {n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None}


# upstream hopper/'s kernels are flash::FlashAttn*Sm90, FA2's flash::flash_fwd_kernel (and
# flash_fwd_splitkv_kernel); torch's own flash kernels are pytorch_flash::
KERNELS = {"3": "flash::FlashAttnFwdSm90", "2": "flash::flash_fwd"}
MODULES = {"3": "flash_attn_interface", "2": "flash_attn"}


def _kernels(model, ids) -> list[str]:
    """The CUDA kernels of one forward, those of attention first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof, torch.no_grad():
        model(input_ids=ids)
    names = {e.name for e in prof.events() if e.device_type.name == "CUDA"}
    attention = ("flash", "fmha", "attention", "sdpa", "cudnn")
    return sorted(names, key=lambda n: not any(a in n.lower() for a in attention))


def main(argv=None) -> int:
    import importlib

    import transformers
    from transformers import LlamaConfig
    from transformers import utils as hf_utils

    args = sys.argv[1:] if argv is None else argv
    fa = args[0] if args and args[0] in KERNELS else "3"
    head_dim = int(args[args.index("--head-dim") + 1]) if "--head-dim" in args else 128
    implementation, kernel = f"flash_attention_{fa}", KERNELS[fa]
    module = importlib.import_module(MODULES[fa])
    config = LlamaConfig(
        vocab_size=1024,
        hidden_size=4 * head_dim,
        intermediate_size=1024,
        num_hidden_layers=2,
        num_attention_heads=4,  # the head dim: the tailored set's only one
        num_key_value_heads=4,
        max_position_embeddings=2048,
    )
    torch.manual_seed(0)
    sdpa = _model(config, "sdpa")
    fa3 = _model(config, implementation, {k: v.cpu() for k, v in sdpa.state_dict().items()})
    ids = torch.randint(0, config.vocab_size, (2, 512), device="cuda")

    with torch.no_grad():
        logits = [m(input_ids=ids).logits.float() for m in (sdpa, fa3)]
    grads = [_grads(m, ids) for m in (sdpa, fa3)]
    prompt = ids[:1, :64]
    tokens = [
        m.generate(prompt, max_new_tokens=32, do_sample=False, pad_token_id=0)[0, 64:].tolist()
        for m in (sdpa, fa3)
    ]
    rel = max(
        ((grads[0][n] - grads[1][n]).norm() / grads[0][n].norm().clamp_min(1e-12)).item()
        for n in grads[0]
    )
    sdpa_kernels, fa3_kernels = _kernels(sdpa, ids), _kernels(fa3, ids)
    report = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        f"is_flash_attn_{fa}_available": getattr(hf_utils, f"is_flash_attn_{fa}_available")(),
        MODULES[fa]: module.__file__,
        "attn_implementation": [m.config._attn_implementation for m in (sdpa, fa3)],
        "sdpa_forward_kernels": [n[:160] for n in sdpa_kernels[:6]],
        f"fa{fa}_forward_kernels": [n[:160] for n in fa3_kernels[:6]],
        f"fa{fa}_kernel_in_sdpa_forward": any(kernel in n for n in sdpa_kernels),
        f"fa{fa}_kernel_in_fa{fa}_forward": any(kernel in n for n in fa3_kernels),
        "logits_max_abs_diff": (logits[0] - logits[1]).abs().max().item(),
        "logits_max_abs": logits[0].abs().max().item(),
        "argmax_agreement": (logits[0].argmax(-1) == logits[1].argmax(-1)).float().mean().item(),
        "grad_max_rel_norm_diff": rel,
        "grad_tensors": len(grads[0]),
        "greedy_tokens_equal": tokens[0] == tokens[1],
        "greedy_tokens": {"sdpa": tokens[0], implementation: tokens[1]},
    }
    json.dump(report, sys.stdout, indent=1)
    print()
    ran = (
        report[f"fa{fa}_kernel_in_fa{fa}_forward"] and not report[f"fa{fa}_kernel_in_sdpa_forward"]
    )
    return 0 if ran else 1


if __name__ == "__main__":
    sys.exit(main())
