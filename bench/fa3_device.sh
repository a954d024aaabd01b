#!/usr/bin/env bash
# FlashAttention-3 on the lent H100 (issue 15), in phases, one `device` call each; results under
# $OUT. Run from fa-shim's root with .carry/ holding: fa3/ (the two FA3 tarballs of ../shared/fa3),
# sdists/flash_attn-2.8.3.tar.gz, whl/ (pyelftools, einops, pytest, pluggy, iniconfig wheels).
#   bash bench/fa3_device.sh tailored   # FA3 bf16/hdim128 fwd+bwd built through pip, timed;
#                                       # FA2 of the same set; the speed table
#   bash bench/fa3_device.sh tests      # starts the full FA3 build in the background, then a
#                                       # seeded sample of upstream's hopper/test_flash_attn.py
#   bash bench/fa3_device.sh poll       # the full build's per-unit times so far (modelled by
#                                       # bench/fa3_full_model.py)
#   bash bench/fa3_device.sh transformers  # the tailored FA3 built and installed as above, then
#                                       # transformers' flash_attention_3 against SDPA
#                                       # (bench/fa3_transformers.py)
#   bash bench/fa3_device.sh refusals   # the tailored FA3 as above, then each left-out feature
#                                       # called (bench/fa3_refusals.py); again forward-only
set -u
# the H100 image's CXX (/opt/gcc/bin/g++) has only libstdc++.a, which fa-shim refuses (its
# modules crashed on their first error: docs/benchmarks.md): the system compiler instead
IMAGE_CXX=${CXX:-} IMAGE_CC=${CC:-}
case "${CXX:-}" in /opt/gcc/*) export CXX=/usr/bin/g++ CC=/usr/bin/gcc ;; esac
phase=$1
OUT=${OUT:-/tmp/out}
ROOT=$PWD
mkdir -p "$OUT" /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
  .carry/whl/pyelftools-*.whl .carry/whl/einops-*.whl .carry/whl/pytest-*.whl \
  .carry/whl/pluggy-*.whl .carry/whl/iniconfig-*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site
# every FA3 switch the tailored set turns off (bench/fa3_upstream_tests.py reads the same names)
FEATURES="fp8,split,paged-kv,appendkv,local,softcap,packgqa,varlen,cluster"
SWITCHES="HDIM64 HDIM96 HDIM192 HDIM256 FP16 FP8 SPLIT PAGEDKV APPENDKV LOCAL SOFTCAP PACKGQA VARLEN CLUSTER"

# the tailored FA3 (bf16, head dim 128, forward + backward, every feature off), timed
# (a name for its log, then extra -C options, e.g. fwd -C forward-only=true)
fa3_tailored() {
  local name=${1:-tailored}; shift
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
  nproc >> "$OUT/gpu.txt"
  start=$(date +%s)
  python3 -m pip install --no-build-isolation --no-deps -v ./flash-attn-3 \
    -C fa3-source-dir="$ROOT/.carry/fa3" -C head-dims=128 -C dtypes=bf16 \
    -C disable=$FEATURES -C cache-dir=/tmp/fa-cache -C compiler-cache=none "$@" \
    > "$OUT/fa3-$name.log" 2>&1
  echo "fa3 $name: exit $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/times.txt"
}

case $phase in
transformers)
  fa3_tailored
  python3 -m fa_backend verify flash_attn_3 > "$OUT/fa3-verify.txt" 2>&1
  cd /tmp && python3 "$ROOT/bench/fa3_transformers.py" > "$OUT/fa3-transformers.json" \
    2> "$OUT/fa3-transformers.err"
  echo "fa3_transformers: exit $?" | tee -a "$OUT/times.txt"
  ;;
refusals)
  fa3_tailored
  (cd /tmp && python3 "$ROOT/bench/fa3_refusals.py") > "$OUT/fa3-refusals.json" 2> "$OUT/fa3-refusals.err"
  echo "fa3_refusals: exit $?" | tee -a "$OUT/times.txt"
  fa3_tailored tailored-fwd -C forward-only=true
  (cd /tmp && python3 "$ROOT/bench/fa3_refusals.py" --forward-only) \
    > "$OUT/fa3-refusals-fwd.json" 2> "$OUT/fa3-refusals-fwd.err"
  echo "fa3_refusals --forward-only: exit $?" | tee -a "$OUT/times.txt"
  ;;
tailored)
  fa3_tailored
  cp /tmp/fa-cache/wheels/*.whl "$OUT/" 2>/dev/null
  python3 -m fa_backend verify flash_attn_3 > "$OUT/fa3-verify.txt" 2>&1
  start=$(date +%s)
  python3 -m pip install --no-build-isolation --no-deps -v . \
    -C sdist-dir="$ROOT/.carry/sdists" -C head-dims=128 -C dtypes=bf16 -C cuda-archs=90 \
    -C disable=dropout,alibi,softcap,local,uneven_k -C cache-dir=/tmp/fa2-cache \
    > "$OUT/fa2-tailored.log" 2>&1
  echo "fa2 tailored: exit $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/times.txt"
  cd /tmp && python3 "$ROOT/bench/fa3_speed.py" --json "$OUT/fa3_speed.json" \
    > "$OUT/fa3_speed.md" 2> "$OUT/fa3_speed.err"
  ;;
tests)
  # the full set (every head dim, dtype and feature), sm_90a, in the background across calls
  (setsid python3 -m pip wheel --no-build-isolation --no-deps -v ./flash-attn-3 -w /tmp/full-out \
    -C fa3-source-dir="$ROOT/.carry/fa3" -C cache-dir=/tmp/fa-full -C compiler-cache=none \
    -C wheel-cache=false -C keep-build-dir=true > /tmp/full.log 2>&1; echo "exit $?" >> /tmp/full.log) &
  date +%s > /tmp/full.start
  mkdir -p /tmp/hopper && tar xzf .carry/fa3/flash-attention-v2.8.3-hopper.tar.gz -C /tmp/hopper
  python3 bench/fa3_upstream_tests.py --hopper /tmp/hopper/flash-attention-v2.8.3/hopper \
    --disable $SWITCHES --sample 100 --seed 15 --out "$OUT/fa3-tests" --budget 420 \
    > "$OUT/fa3-tests.txt" 2>&1
  ;;
poll)
  echo "elapsed $(( $(date +%s) - $(cat /tmp/full.start) )) s" > "$OUT/full-elapsed.txt"
  cp /tmp/full.log "$OUT/full.log"
  for f in /tmp/fa-shim-build-*/src/compile-stats.jsonl; do cp "$f" "$OUT/full-compile-stats.jsonl"; done
  grep -c . "$OUT/full-compile-stats.jsonl"
  ;;
esac
