#!/usr/bin/env bash
# Every kernel family of a flash-attn release against one torch (issue "Zero prerequisites", 2):
# forward, forward causal, backward, backward causal and split-KV forward (causal and not), in
# fp16 and bf16, one head dimension, one architecture; built through fa-shim (the whole pipeline:
# prepare, compile, link, repack, verify), then installed into a directory, imported with that
# torch and verified again from there.
#   PY=/venv/bin/python bench/kernel_families.sh RESULTS_DIR VERSION...
# Settings: HEAD_DIM (64), ARCH (80), MAX_JOBS (2). Upstream's five DISABLE switches narrow each
# kernel (dropout, ALiBi, softcap, local window, uneven K) but keep every family.
# Per version in RESULTS_DIR: VERSION.json (bench/measure.py: wall time, peak RSS),
# VERSION-tus.jsonl (per-TU compile times), VERSION.log (fa-shim's lines), VERSION-import.txt.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
RESULTS=$(realpath -m "$1"); shift
PY=${PY:?PY=/path/to/python of the torch to build against}
SDISTS=${SDISTS:-$REPO/../shared/sdists}
WORK=${WORK:-/tmp/fa-kernel-families}
mkdir -p "$RESULTS" "$WORK"
for version in "$@"; do
    rm -rf "$WORK/$version" && mkdir -p "$WORK/$version/tmp"
    (cd "$WORK/$version" && TMPDIR=$WORK/$version/tmp XDG_CACHE_HOME=$WORK/$version/xdg \
        $PY "$REPO/bench/measure.py" "$RESULTS/$version.json" -- \
        $PY -m pip wheel -v --no-deps --no-build-isolation -w "$WORK/$version/out" "$REPO" \
        -C flash-attn-version="$version" -C sdist-dir="$SDISTS" -C cuda-archs="${ARCH:-80}" \
        -C head-dims="${HEAD_DIM:-64}" -C dtypes=fp16,bf16 \
        -C disable=dropout,alibi,softcap,local,uneven_k -C max-jobs="${MAX_JOBS:-2}" \
        -C nvcc-threads=1 -C compiler-cache=none -C wheel-cache=false -C keep-build-dir=true \
        >"$WORK/$version/build.log" 2>&1) || { tail -40 "$WORK/$version/build.log"; exit 1; }
    grep "fa-shim:" "$WORK/$version/build.log" >"$RESULTS/$version.log"
    kept=$(grep -o "kept the build directory [^ ]*" "$WORK/$version/build.log" | tail -1 | cut -d' ' -f5)
    cp "$kept/src/compile-stats.jsonl" "$RESULTS/$version-tus.jsonl"
    rm -rf "$kept"
    wheel=$(ls "$WORK/$version"/out/*.whl)
    $PY -m pip install -q --no-deps --target "$WORK/$version/site" "$wheel"
    (cd "$WORK/$version" && PYTHONPATH=$WORK/$version/site $PY -c '
import flash_attn, flash_attn_2_cuda, torch
print("wheel", "'"$(basename "$wheel")"'")
print("imported flash_attn", flash_attn.__version__, "with torch", torch.__version__)
print("module", flash_attn_2_cuda.__file__)' &&
        PYTHONPATH=$WORK/$version/site:$REPO $PY -m fa_backend verify "$WORK/$version/site") \
        >"$RESULTS/$version-import.txt" 2>&1 || { cat "$RESULTS/$version-import.txt"; exit 1; }
    tail -n 3 "$RESULTS/$version-import.txt"
done
