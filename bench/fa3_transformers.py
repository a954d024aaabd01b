"""transformers' attn_implementation="flash_attention_3" on the FA3 that fa-shim built (GPU).

A small Llama made from a config (random weights, nothing downloaded: head dim 128, bf16, 4
heads, 2 layers) runs twice with the same weights: once on torch's SDPA, once on
flash_attention_3. Printed as JSON: where transformers found flash_attn_interface (it must be the
fa-shim wheel's), the FA3 kernels the profiler saw in the flash_attention_3 forward, and the
differences against SDPA in logits, in the gradients of a loss, and in greedy tokens.

    python bench/fa3_transformers.py > fa3-transformers.json

Needs a Hopper GPU, transformers and an installed flash-attn-3 built with head dim 128 and bf16.
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


# upstream hopper/'s kernels are flash::FlashAttn*Sm90; torch's own flash kernels, pytorch_flash::
FA3_KERNEL = "flash::FlashAttnFwdSm90"


def _kernels(model, ids) -> list[str]:
    """The CUDA kernels of one forward, those of attention first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof, torch.no_grad():
        model(input_ids=ids)
    names = {e.name for e in prof.events() if e.device_type.name == "CUDA"}
    attention = ("flash", "fmha", "attention", "sdpa", "cudnn")
    return sorted(names, key=lambda n: not any(a in n.lower() for a in attention))


def main() -> int:
    import flash_attn_interface
    import transformers
    from transformers import LlamaConfig
    from transformers.utils import is_flash_attn_3_available

    config = LlamaConfig(
        vocab_size=1024,
        hidden_size=512,
        intermediate_size=1024,
        num_hidden_layers=2,
        num_attention_heads=4,  # head dim 128: the tailored set's only one
        num_key_value_heads=4,
        max_position_embeddings=2048,
    )
    torch.manual_seed(0)
    sdpa = _model(config, "sdpa")
    fa3 = _model(config, "flash_attention_3", {k: v.cpu() for k, v in sdpa.state_dict().items()})
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
        "is_flash_attn_3_available": is_flash_attn_3_available(),
        "flash_attn_interface": flash_attn_interface.__file__,
        "attn_implementation": [m.config._attn_implementation for m in (sdpa, fa3)],
        "sdpa_forward_kernels": [n[:160] for n in sdpa_kernels[:6]],
        "fa3_forward_kernels": [n[:160] for n in fa3_kernels[:6]],
        "fa3_kernel_in_sdpa_forward": any(FA3_KERNEL in n for n in sdpa_kernels),
        "fa3_kernel_in_fa3_forward": any(FA3_KERNEL in n for n in fa3_kernels),
        "logits_max_abs_diff": (logits[0] - logits[1]).abs().max().item(),
        "logits_max_abs": logits[0].abs().max().item(),
        "argmax_agreement": (logits[0].argmax(-1) == logits[1].argmax(-1)).float().mean().item(),
        "grad_max_rel_norm_diff": rel,
        "grad_tensors": len(grads[0]),
        "greedy_tokens_equal": tokens[0] == tokens[1],
        "greedy_tokens": {"sdpa": tokens[0], "flash_attention_3": tokens[1]},
    }
    json.dump(report, sys.stdout, indent=1)
    print()
    ran = report["fa3_kernel_in_fa3_forward"] and not report["fa3_kernel_in_sdpa_forward"]
    return 0 if ran else 1


if __name__ == "__main__":
    sys.exit(main())
