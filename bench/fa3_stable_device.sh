#!/usr/bin/env bash
# FlashAttention-3's stable line (issue 23: upstream main at 0251105a, torch's stable ABI) on the
# lent H100 (torch 2.11.0+cu130, nvcc 13.0, Python 3.12, 16 cores, no network), about 10-12
# minutes in all; every result under $OUT. Run from fa-shim's root with .carry/ holding
#   fa3/  the four tarballs of ../shared/fa3 (both lines' hopper and CUTLASS trees)
#   whl/  pyelftools, einops, pytest, pluggy, iniconfig wheels (py3-none-any)
# (`bash bench/fa3_stable_carry.sh` fills it here). A device call runs at most 10 minutes, so two
# calls on the same warm machine, each with carry [".carry"]:
#   bash bench/fa3_stable_device.sh first    # 1-3, about 8 min
#   bash bench/fa3_stable_device.sh second   # 4-6, about 3 min (reads /tmp of the first)
# (`all`, the default, runs both in one go where no such limit applies.) transformers comes from
# the device's image, as for bench/fa3_device.sh.
#
#  1. the tailored stable set (bf16, head dim 128, fwd + bwd, every feature off) built and installed
#     through pip, timed alone; its verify; its wheel kept (times.txt, stable-build.log)
#  2. v2.8.3's FA3 of the same set built in the background into /tmp/fa3-v283 (the speed table's
#     second FA3; it outlives the first call), while
#  3. a seeded sample of upstream's own hopper/test_flash_attn.py at 0251105a runs under the
#     build's switches (bench/fa3_upstream_tests.py; upstream-tests/summary.md)
#  4. transformers' flash_attention_3 against SDPA (bench/fa3_transformers.py)
#  5. Q/K head dim 64 with V 256 on each build (bench/fa3_vhead_probe.py: patch 06's new guard)
#  6. the speed table (bf16, causal, head dim 128, L = 1k/4k/16k): SDPA, v2.8.3's FA3, the stable
#     FA3, each build in its own process (bench/fa3_speed.py), merged (bench/fa3_stable_table.py)
set -u
# the H100 image's CXX (/opt/gcc/bin/g++) has only libstdc++.a, which fa-shim refuses (its
# modules crashed on their first error: docs/benchmarks.md): the system compiler instead
IMAGE_CXX=${CXX:-} IMAGE_CC=${CC:-}
case "${CXX:-}" in /opt/gcc/*) export CXX=/usr/bin/g++ CC=/usr/bin/gcc ;; esac
phase=${1:-all}
OUT=${OUT:-/tmp/out}
ROOT=$PWD
COMMIT=0251105a2fb19d2957484b7f023cd8c115286ced
mkdir -p "$OUT" /tmp/site
stamp() { echo "$(date +%T) $*" | tee -a "$OUT/times.txt"; }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
  .carry/whl/pyelftools-*.whl .carry/whl/einops-*.whl .carry/whl/pytest-*.whl \
  .carry/whl/pluggy-*.whl .carry/whl/iniconfig-*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; python3 -V
  python3 -c "import torch; print(torch.__version__)"; nvcc --version | tail -1; git rev-parse HEAD
} > "$OUT/machine.txt" 2>&1
FEATURES="fp8,split,paged-kv,appendkv,local,softcap,packgqa,varlen,cluster"
SWITCHES="HDIM64 HDIM96 HDIM192 HDIM256 HDIMDIFF64 HDIMDIFF192 FP16 FP8 SPLIT PAGEDKV APPENDKV LOCAL SOFTCAP PACKGQA VARLEN CLUSTER"
SET=(-C fa3-source-dir="$ROOT/.carry/fa3" -C head-dims=128 -C dtypes=bf16 -C disable=$FEATURES
     -C compiler-cache=none)

if [ "$phase" != second ]; then
# 1. the stable line (what torch 2.11 gets by default), alone on the machine
stamp "stable build: start"
start=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -v ./flash-attn-3 "${SET[@]}" \
  -C cache-dir=/tmp/fa-stable > "$OUT/stable-build.log" 2>&1
stamp "stable build: exit $? in $(( $(date +%s) - start )) s (pip install, tailored set)"
cp /tmp/fa-stable/wheels/*.whl "$OUT/" 2>/dev/null
grep -E "fa-shim: (FlashAttention-3|about to|  estimate|upstream build|compiled [0-9]+/|verified)" \
  "$OUT/stable-build.log" > "$OUT/stable-build-summary.txt"
python3 -m fa_backend verify flash_attn_3 > "$OUT/stable-verify.txt" 2>&1

# 2. v2.8.3's FA3 of the same set, for the speed table: its own session, so that it outlives a
#    first call that ends before it does; its log and times stay in /tmp for the second call
cat > /tmp/v283.sh <<V283
start=\$(date +%s)
python3 -m pip wheel --no-build-isolation --no-deps -v ./flash-attn-3 -w /tmp/v283-wheel \\
  ${SET[*]} -C fa3-release=2.8.3 -C cache-dir=/tmp/fa-v283 -C max-jobs=8 > /tmp/v283-build.log 2>&1
code=\$?
python3 -m pip install -q --no-deps --no-index --target /tmp/fa3-v283 /tmp/v283-wheel/*.whl \\
  >> /tmp/v283-build.log 2>&1
echo "\$(date +%T) v2.8.3 build (background, 8 jobs): exit \$code in \$(( \$(date +%s) - start )) s" \\
  > /tmp/v283.done
V283
rm -f /tmp/v283.done
setsid bash /tmp/v283.sh < /dev/null > /dev/null 2>&1 &

# 3. upstream's own tests at 0251105a, a seeded sample under the build's switches
mkdir -p /tmp/hopper && tar xzf .carry/fa3/flash-attention-$COMMIT-hopper.tar.gz -C /tmp/hopper
stamp "upstream tests: start"
python3 bench/fa3_upstream_tests.py --hopper /tmp/hopper/flash-attention-$COMMIT/hopper \
  --disable $SWITCHES --sample 60 --seed 23 --out "$OUT/upstream-tests" --budget 240 \
  > "$OUT/upstream-tests.txt" 2>&1
stamp "upstream tests: exit $?"
fi
[ "$phase" = first ] && exit 0

# 4. transformers' flash_attention_3 against SDPA
(cd /tmp && python3 "$ROOT/bench/fa3_transformers.py") > "$OUT/transformers.json" \
  2> "$OUT/transformers.err"
stamp "transformers: exit $?"

# 5. Q/K 64 with V 256: the stable build (installed), then v2.8.3's once it is there
(cd /tmp && python3 "$ROOT/bench/fa3_vhead_probe.py") > "$OUT/vhead-stable.json" 2>&1
stamp "vhead probe (stable): exit $?"
for _ in $(seq 80); do [ -f /tmp/v283.done ] && break; sleep 5; done  # its build, <= 400 s
cat /tmp/v283.done >> "$OUT/times.txt" 2>/dev/null || stamp "v2.8.3 build: not finished"
cp /tmp/v283-build.log "$OUT/" 2>/dev/null
v283() {  # v2.8.3's FA3 first on the path, or nothing (never the stable one in its place)
  [ -f /tmp/fa3-v283/flash_attn_interface.py ] || { echo "no v2.8.3 FA3 in /tmp/fa3-v283"; return 3; }
  (cd /tmp && PYTHONPATH=/tmp/fa3-v283:$PYTHONPATH python3 "$@")
}
v283 "$ROOT/bench/fa3_vhead_probe.py" > "$OUT/vhead-v283.json" 2>&1
stamp "vhead probe (v2.8.3): exit $?"

# 6. the speed table: each FA3 in its own process (both register torch.ops.flash_attn_3)
(cd /tmp && python3 "$ROOT/bench/fa3_speed.py" --impls sdpa,fa3 --json "$OUT/speed-stable.json") \
  > "$OUT/speed-stable.md" 2> "$OUT/speed-stable.err"
stamp "speed (stable): exit $?"
v283 "$ROOT/bench/fa3_speed.py" --impls sdpa,fa3 --json "$OUT/speed-v283.json" \
  > "$OUT/speed-v283.md" 2> "$OUT/speed-v283.err"
stamp "speed (v2.8.3): exit $?"
python3 bench/fa3_stable_table.py --stable "$OUT/speed-stable.json" --v283 "$OUT/speed-v283.json" \
  > "$OUT/speed-table.md" 2>&1
stamp "done"
