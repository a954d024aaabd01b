#!/usr/bin/env bash
# Issue 45 on the 64-core GPU box: the cold FA2 full set (flash-attn 2.8.3.post2, sm_90) through
# plain pip, as a user builds it, from a copy of the checkout under /tmp (a build must not run
# from the checkout the next device call replaces). Records in OUT:
#   machine.txt      GPU, cores, memory, commit, torch, nvcc
#   fa2-full.json    bench/measure.py: the wall time and the build's peak RSS (its process tree)
#   memory.txt       the machine's memory in use every 5 s (epoch seconds, bytes)
#   fa2-full.log     pip -v; fa2-full-fa-shim.log its fa-shim lines (the sizing, the parts, the
#                    compile plan, the estimate block, progress)
#   fa2-full-tus.jsonl   the compiler launcher's per-unit records (pipeline/_stats)
#   build.ninja      the plan as ninja ran it (the units' order, pools)
#   fa2-full-bound.txt   bench/bound_check.py: the compile phase against max(longest, sum/cores)
# The box reaches no index: WHEELS (default .carry/whl) holds the wheels the image lacks
# (pyelftools for verify; psutil if python3 lacks it, for bench/measure.py).
#   bash bench/big_box_device.sh /path/to/flash_attn-2.8.3.post2.tar.gz [OUT]
set -euo pipefail
SDIST=$(realpath "${1:?usage: bench/big_box_device.sh SDIST [OUT]}")
OUT=$(realpath -m "${2:-${OUT:-$PWD/out}}")
ROOT=$PWD
WORK=/tmp/big-box
WHEELS=${WHEELS:-$ROOT/.carry/whl}
rm -rf "$WORK" && mkdir -p "$WORK/sdists" "$OUT"
cp "$SDIST" "$WORK/sdists/"
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target "$WORK/site" "$WHEELS"/*.whl
  export PYTHONPATH=$WORK/site
fi
# the image's own compiler has only a static libstdc++, which fa-shim refuses
export CXX=/usr/bin/g++ CC=/usr/bin/gcc PYTHONUNBUFFERED=1
cp -a "$ROOT" "$WORK/src" && rm -rf "$WORK/src/.carry"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; free -g | head -2
  git -C "$ROOT" rev-parse HEAD; python3 -c "import torch; print('torch', torch.__version__)"
  nvcc --version | tail -2; } >"$OUT/machine.txt" 2>&1 || true

(while :; do echo "$(date +%s) $(free -b | awk '/^Mem:/ {print $3}')"; sleep 5; done) \
  >"$OUT/memory.txt" &
sampler=$!
trap 'kill $sampler 2>/dev/null || true' EXIT
status=0
python3 "$ROOT/bench/measure.py" "$OUT/fa2-full.json" -- python3 -m pip wheel -v --no-deps \
  --no-build-isolation --no-index -w "$WORK/wheels" "$WORK/src" -C sdist-dir="$WORK/sdists" \
  -C cuda-archs=90 -C compiler-cache=none -C keep-build-dir=true -C cache-dir="$WORK/cache" \
  >"$OUT/fa2-full.log" 2>&1 || status=$?
kill $sampler
echo "fa2-full: exit $status $(cat "$OUT/fa2-full.json" 2>/dev/null)" | tee "$OUT/times.txt"
grep -o "fa-shim: .*" "$OUT/fa2-full.log" >"$OUT/fa2-full-fa-shim.log" || true
kept=$(grep -o "kept the build directory [^ ]*" "$OUT/fa2-full.log" | tail -1 | cut -d' ' -f5)
if [ -n "$kept" ]; then
  find "$kept" -name compile-stats.jsonl -exec cp {} "$OUT/fa2-full-tus.jsonl" \;
  cp "$(find "$kept" -name build.ninja | head -1)" "$OUT/build.ninja" || true
  rm -rf "$kept"
fi
if [ -f "$OUT/fa2-full-tus.jsonl" ]; then
  python3 "$ROOT/bench/bound_check.py" "$OUT/fa2-full-tus.jsonl" --cores "$(nproc)" \
    --wall-json "$OUT/fa2-full.json" | tee "$OUT/fa2-full-bound.txt"
fi
exit "$status"
