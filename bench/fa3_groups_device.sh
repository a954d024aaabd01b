#!/usr/bin/env bash
# FlashAttention-3 with forward variants compiled together (flavours/fa3/_groups) on the lent
# GPU machine: a tailored set whose forward variants fa-shim groups, built through pip and then
# checked by upstream's own tests, which call those variants (split, softcap, packgqa). Run from
# fa-shim's root with .carry/ filled by `bash bench/fa3_stable_carry.sh`; two calls on the same
# warm machine, each with carry [".carry"]:
#   bash bench/fa3_groups_device.sh build   # the build in its own session, waited for (~6 min)
#   bash bench/fa3_groups_device.sh check   # its verify, then a seeded sample of upstream's
#                                           # hopper/test_flash_attn.py (~5 min)
# The set: bf16, head dim 128, forward + backward, varlen kept, with split, softcap and packgqa
# kept too: six forward variants, two groups of three at -C fa3-group=5 (main-0251105a, what
# torch 2.11 gets). Every result under $OUT.
set -u
case "${CXX:-}" in /opt/gcc/*) export CXX=/usr/bin/g++ CC=/usr/bin/gcc ;; esac  # speed_device.sh
phase=${1:?phase: build or check}
OUT=${OUT:-/tmp/out}
ROOT=$PWD
WORK=/tmp/groups-work
COMMIT=0251105a2fb19d2957484b7f023cd8c115286ced
mkdir -p "$OUT" "$WORK/site"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$WORK/site" \
  .carry/whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$WORK/site PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" | tee -a "$OUT/times.txt"; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; free -g | head -2
  git rev-parse HEAD; } > "$OUT/machine-$phase.txt" 2>&1

case $phase in
build)
  rm -rf "$WORK/src" "$WORK/cache" "$WORK/build.done" && cp -a "$ROOT" "$WORK/src"
  cat > "$WORK/build.sh" <<BUILD
start=\$(date +%s)
python3 -m pip install -v --no-build-isolation --no-deps --no-index "$WORK/src/flash-attn-3" \\
  -C fa3-source-dir="$WORK/src/.carry/fa3" -C head-dims=128 -C dtypes=bf16 \\
  -C disable=fp8,paged-kv,appendkv,local,cluster -C fa3-group=5 -C compiler-cache=none \\
  -C keep-build-dir=true -C cache-dir="$WORK/cache" > "$WORK/build.log" 2>&1
echo "build: exit \$? in \$(( \$(date +%s) - start )) s" > "$WORK/build.done"
BUILD
  (setsid bash "$WORK/build.sh" < /dev/null > /dev/null 2>&1 &)
  stamp "build: started"
  for _ in $(seq 1 108); do [ -f "$WORK/build.done" ] && break; sleep 5; done
  stamp "$(cat "$WORK/build.done" 2>/dev/null || echo 'build: still running')"
  grep -o "fa-shim: .*" "$WORK/build.log" > "$OUT/build-fa-shim.log"
  ;;
check)
  for _ in $(seq 1 60); do [ -f "$WORK/build.done" ] && break; sleep 5; done
  stamp "$(cat "$WORK/build.done" 2>/dev/null || echo 'build: not finished')"
  grep -o "fa-shim: .*" "$WORK/build.log" > "$OUT/build-fa-shim.log"
  kept=$(grep -o "kept the build directory [^ ]*" "$WORK/build.log" | tail -1 | cut -d' ' -f5)
  [ -n "$kept" ] && find "$kept" -name compile-stats.jsonl -exec cp {} "$OUT/build-tus.jsonl" \;
  [ -n "$kept" ] && find "$kept" -name "*_group*of*.cu" -exec head -20 {} + > "$OUT/group-files.txt"
  python3 -m fa_backend verify flash_attn_3 > "$OUT/verify.txt" 2>&1
  stamp "verify: exit $?"
  mkdir -p "$WORK/hopper" && tar xzf .carry/fa3/flash-attention-$COMMIT-hopper.tar.gz -C "$WORK/hopper"
  python3 bench/fa3_upstream_tests.py --hopper "$WORK/hopper/flash-attention-$COMMIT/hopper" \
    --disable HDIM64 HDIM96 HDIM192 HDIM256 HDIMDIFF64 HDIMDIFF192 FP16 FP8 PAGEDKV APPENDKV \
    LOCAL CLUSTER --sample 80 --seed 26 --out "$OUT/upstream-tests" --budget 300 \
    > "$OUT/upstream-tests.txt" 2>&1
  stamp "upstream tests: exit $?"
  ;;
esac
