#!/usr/bin/env bash
# The default release (2.8.3.post2) on a GPU machine, as a user builds it: a tailored training set
# (hdim 128, bf16, forward + backward, upstream's five DISABLE switches) through plain pip with a
# wheel cache, then verify, forward and backward against torch's SDPA on the GPU, and the
# teammate's one line (docs/guides/fleet.md) installing the wheel from the cache's torch
# directory into a second environment. Run from the checkout root on the GPU machine, with the
# upstream sdist in .carry/sdists and the pyelftools wheel in .carry/whl (neither is there):
#   bash bench/default_release_device.sh      # writes $OUT/*.log (or ./out without $OUT)
set -euo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/whl/*.whl
export PYTHONPATH=/tmp/site CXX=/usr/bin/g++ CC=/usr/bin/gcc
rm -rf /tmp/fa && cp -a . /tmp/fa && rm -rf /tmp/fa/.carry
cd /tmp/fa
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/machine.log"
nproc >>"$OUT/machine.log"
start=$(date +%s)
python3 -m pip install -v --no-build-isolation --no-deps --target /tmp/fa-site . \
    -C sdist-dir="$OLDPWD/.carry/sdists" -C wheel-cache-dir=/tmp/team-cache \
    -C head-dims=128 -C dtypes=bf16 -C disable=dropout,alibi,softcap,local,uneven_k \
    >"$OUT/build.log" 2>&1
echo "build: $(($(date +%s) - start)) s" | tee -a "$OUT/machine.log"
grep -E "fa-shim: (nvcc|using|teammates|built|verified|upstream build)" "$OUT/build.log" | tee -a "$OUT/machine.log" || true
PYTHONPATH=/tmp/fa-site:/tmp/site python3 -m fa_backend verify flash_attn >"$OUT/verify.log" 2>&1 || true
tail -3 "$OUT/verify.log"
PYTHONPATH=/tmp/fa-site python3 - <<'PY' 2>&1 | tee "$OUT/numerics.log"
import flash_attn, torch
import torch.nn.functional as F
from flash_attn import flash_attn_func

print("flash_attn", flash_attn.__version__, "torch", torch.__version__)
torch.manual_seed(0)
worst = 0.0
for batch, seqlen, heads, causal in [(2, 512, 8, False), (2, 1024, 16, True), (1, 4096, 8, True)]:
    q, k, v = (torch.randn(batch, seqlen, heads, 128, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=causal)
    grad = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad)
    # the reference in float32, SDPA's layout (batch, heads, seqlen, dim)
    qr, kr, vr = (t.detach().float().transpose(1, 2).requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
    rq, rk, rv = torch.autograd.grad(ref, (qr, kr, vr), grad.float().transpose(1, 2))
    errs = {
        "out": (out.float() - ref.transpose(1, 2)).abs().max().item(),
        "dq": (dq.float() - rq.transpose(1, 2)).abs().max().item(),
        "dk": (dk.float() - rk.transpose(1, 2)).abs().max().item(),
        "dv": (dv.float() - rv.transpose(1, 2)).abs().max().item(),
    }
    worst = max(worst, *errs.values())
    print(batch, seqlen, heads, "causal" if causal else "full",
          " ".join(f"{k} {e:.4f}" for k, e in errs.items()))
print("worst abs error against float32 SDPA:", f"{worst:.4f}", "OK" if worst < 0.05 else "FAIL")
PY
# the teammate: a second environment, the one line from the guide, the cache's torch directory
# (that machine reaches no index: --no-index; its interpreter is python3)
line=$(grep '^pip install --only-binary flash-attn' docs/guides/fleet.md | sed 's|/shared/fa|/tmp/team-cache|; s|python -c|python3 -c|; s|^pip install|python3 -m pip install --no-index --target /tmp/mate-site --no-deps|')
echo "$line" >"$OUT/teammate.log"
bash -c "$line" >>"$OUT/teammate.log" 2>&1 && echo "teammate line: installed" | tee -a "$OUT/teammate.log"
ls /tmp/team-cache/torch-*/ | tee -a "$OUT/teammate.log"
PYTHONPATH=/tmp/mate-site python3 -c "import flash_attn, flash_attn_2_cuda; print('teammate import', flash_attn.__version__)" 2>&1 | tee -a "$OUT/teammate.log"
