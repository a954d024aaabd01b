#!/usr/bin/env bash
# Issue 45 on the 64-core GPU box: FlashAttention-3's full set (flash-attn-3's default release,
# sm_90a from the visible GPUs) timed whole through plain pip, as a user builds it, from a copy of
# the checkout under /tmp: the build runs under setsid and outlives each device call.
# From fa-shim's root with .carry/fa3 (../shared/fa3's tarballs) and .carry/whl (pyelftools):
#   bash bench/fa3_big_box_device.sh start        # copy, start; returns after 60 s
#   bash bench/fa3_big_box_device.sh wait [SECS]  # wait for the end (default 540 s), then records
# Records in $OUT (the last `wait`'s, once the build ended, all of them):
#   machine.txt        GPU, cores, memory, commit, torch, nvcc
#   fa3-full.json      bench/measure.py: the wall time and the build's peak RSS (its process tree)
#   fa3-full-fa-shim.log  the fa-shim lines (the plan, the estimate block, progress, verify)
#   fa3-full-tus.jsonl the compiler launcher's per-unit records (pipeline/_stats)
#   fa3-full-bound.txt bench/bound_check.py: the compile phase against max(longest, sum/cores)
#   records.tar.gz     build.ninja (the plan as ninja ran it), memory.txt (bytes in use every
#                      5 s), the whole pip -v log
set -uo pipefail
phase=${1:?usage: bench/fa3_big_box_device.sh start|wait [SECONDS]}
ROOT=$PWD
OUT=${OUT:-$PWD/out}
KEEP=/tmp/fa3-big-box
mkdir -p "$OUT"
export CXX=/usr/bin/g++ CC=/usr/bin/gcc PYTHONUNBUFFERED=1 PYTHONPATH=$KEEP/site

case $phase in
start)
    rm -rf "$KEEP" /tmp/fa-shim-build-* && mkdir -p "$KEEP"
    cp -a "$ROOT" "$KEEP/src"
    python3 -m pip install -q --no-index --no-deps --target "$KEEP/site" "$ROOT"/.carry/whl/*.whl
    { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; free -g | head -2
      git -C "$ROOT" rev-parse HEAD; python3 -c "import torch; print('torch', torch.__version__)"
      nvcc --version | tail -2; } >"$KEEP/machine.txt" 2>&1
    (setsid bash -c 'while :; do echo "$(date +%s) $(free -b | awk "/^Mem:/ {print \$3}")"; sleep 5; done' \
        >"$KEEP/memory.txt" 2>&1 &)
    (cd "$KEEP/src" && setsid bash -c "python3 bench/measure.py $KEEP/fa3-full.json -- \
        python3 -m pip wheel -v --no-deps --no-build-isolation --no-index -w $KEEP/wheels \
        ./flash-attn-3 -C fa3-source-dir=.carry/fa3 -C cache-dir=$KEEP/cache \
        -C compiler-cache=none -C keep-build-dir=true >$KEEP/fa3-full.log 2>&1; \
        echo \"exit \$?\" >$KEEP/done" >/dev/null 2>&1 &)
    sleep 60
    grep -o 'fa-shim: .*' "$KEEP/fa3-full.log" | tail -n 20
    ;;
wait)
    deadline=$(($(date +%s) + ${2:-540}))
    while [ ! -f "$KEEP/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
    grep -o 'fa-shim: .*' "$KEEP/fa3-full.log" >"$OUT/fa3-full-fa-shim.log"
    cp "$KEEP/machine.txt" "$OUT/"
    if [ ! -f "$KEEP/done" ]; then
        tail -n 3 "$OUT/fa3-full-fa-shim.log"
        exit 0
    fi
    pkill -f 'free -b' || true
    cat "$KEEP/done" "$KEEP/fa3-full.json"
    kept=$(grep -o "kept the build directory [^ ]*" "$KEEP/fa3-full.log" | tail -1 | cut -d' ' -f5)
    find "$kept" -name compile-stats.jsonl -exec cp {} "$OUT/fa3-full-tus.jsonl" \;
    cp "$(find "$kept" -name build.ninja | head -1)" "$KEEP/build.ninja"
    cp "$KEEP/fa3-full.json" "$OUT/"
    jobs=$(grep -o 'jobs: [0-9]*' "$OUT/fa3-full-fa-shim.log" | head -1 | cut -d' ' -f2)
    python3 bench/bound_check.py "$OUT/fa3-full-tus.jsonl" --cores "$(nproc)" --jobs "$jobs" \
        --fa3 --wall-json "$KEEP/fa3-full.json" 2>&1 | tee "$OUT/fa3-full-bound.txt"
    tar -czf "$OUT/records.tar.gz" -C "$KEEP" build.ninja memory.txt fa3-full.log
    tail -n 6 "$OUT/fa3-full-fa-shim.log"
    ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
