#!/usr/bin/env bash
# Build-time benchmark (issue "Build speed"), on the GPU machine, from the repository root:
#   RESULTS=dir bench/build_bench.sh PHASE...
# Phases:
#   tailored   fa-shim tailored builds, timed cold (empty caches): hdim128+bf16+forward-only
#              (this seeds the wheel cache), then the same with upstream's five DISABLE switches;
#              fa-shim's defaults otherwise (on 16 cores: each forward source as 4 parts)
#   tailored-unsplit  the control: the DISABLE build again with -C tu-parts=1 (wheel cache off)
#   cache-hit  the first tailored build again, twice: wheel cache hits
#   full-start / full-wait   fa-shim's full build (every kernel, the detected arch), alone, in
#              the background; wait polls it (WAIT_STEPS x 10 s)
#   compiler-cache  the first tailored build twice more through ccache (wheel cache off): cold
#              (an empty CCACHE_DIR) and warm — the compiler cache's second-build time
#   stock-start / stock-wait   upstream's own build, FORCE_BUILD, FLASH_ATTN_CUDA_ARCHS=90,
#              MAX_JOBS=16 (what the issue measured), in the background; wait polls it and
#              copies ninja's log (per-object times, also of an unfinished build).
#              STOCK_ARCHS=default: upstream's default archs and its own MAX_JOBS/NVCC_THREADS
# Each timing is bench/measure.py's JSON (wall time, peak RSS of the process tree) in $RESULTS;
# each fa-shim build's per-TU times (fa-shim's compiler launcher) in $RESULTS/NAME-tus.jsonl,
# summarised by bench/tu_summary.py.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
RESULTS=${RESULTS:-$REPO/bench-results}
WORK=${WORK:-/tmp/fa-bench}
CACHE=${CACHE:-/tmp/fa-acceptance/fa-shim-cache}
PY=${PY:-python3}
SDISTS=${SDISTS:-$REPO/.carry/sdists}
mkdir -p "$RESULTS" "$WORK"
export PYTHONUNBUFFERED=1 XDG_CACHE_HOME=$WORK/xdg
[ -d "$REPO/.whl" ] && $PY -m pip install -q --no-index --no-deps --target "$WORK/site" "$REPO"/.whl/*.whl \
    && export PYTHONPATH=$WORK/site
TAILORED=(-C head-dims=128 -C dtypes=bf16 -C forward-only=true)
# EXTRA="-C cuda-archs=80" etc. applies to every fa-shim build (a box without a GPU needs an arch)
read -r -a EXTRA <<< "${EXTRA:-}"

fa_shim_wheel() {  # NAME SETTINGS...: one timed pip wheel of fa-shim
    local name=$1; shift
    (cd "$WORK" && $PY "$REPO/bench/measure.py" "$RESULTS/$name.json" -- \
        $PY -m pip wheel -v --no-deps --no-build-isolation --no-index -w "$WORK/w-$name" "$REPO" \
        -C sdist-dir="$SDISTS" -C cache-dir="$CACHE" -C keep-build-dir=true "${EXTRA[@]}" "$@" \
        > "$WORK/$name.log" 2>&1) || { tail -30 "$WORK/$name.log"; return 1; }
    grep -E "fa-shim: (CUDA arch|[0-9]+ compile job|compiling each|wheel cache hit|built|verified)" "$WORK/$name.log" || true
    keep_tu_stats "$name"
}

keep_tu_stats() {  # NAME: the kept scratch directory's per-TU times into $RESULTS, then drop it
    local kept
    kept=$(grep -o "kept the build directory [^ ]*" "$WORK/$1.log" | tail -1 | cut -d' ' -f5)
    [ -n "$kept" ] || return 0
    [ -f "$kept/src/compile-stats.jsonl" ] && cp "$kept/src/compile-stats.jsonl" "$RESULTS/$1-tus.jsonl"
    rm -rf "$kept"
}

for phase in "$@"; do
    case $phase in
        tailored)
            fa_shim_wheel tailored "${TAILORED[@]}" -C compiler-cache=none
            fa_shim_wheel tailored-disable "${TAILORED[@]}" -C compiler-cache=none \
                -C disable=dropout,alibi,softcap,local,uneven_k ;;
        tailored-unsplit)
            fa_shim_wheel tailored-disable-unsplit "${TAILORED[@]}" -C compiler-cache=none \
                -C disable=dropout,alibi,softcap,local,uneven_k -C tu-parts=1 -C wheel-cache=false ;;
        cache-hit)
            fa_shim_wheel cache-hit "${TAILORED[@]}" -C compiler-cache=none
            fa_shim_wheel cache-hit-2 "${TAILORED[@]}" -C compiler-cache=none ;;
        full-start)
            (cd "$WORK" && setsid nohup $PY "$REPO/bench/measure.py" "$WORK/full.json" -- \
                $PY -m pip wheel -v --no-deps --no-build-isolation --no-index -w "$WORK/w-full" "$REPO" \
                -C sdist-dir="$SDISTS" -C cache-dir="$CACHE" -C keep-build-dir=true -C compiler-cache=none \
                "${EXTRA[@]}" > "$WORK/full.log" 2>&1 < /dev/null &) ;;
        full-wait)
            for _ in $(seq 1 ${WAIT_STEPS:-54}); do
                [ -f "$WORK/full.json" ] && break
                sleep 10
            done
            grep -o "compiled [0-9]*/[0-9]*.*" "$WORK/full.log" | tail -1 || true
            if [ -f "$WORK/full.json" ]; then
                cp "$WORK/full.json" "$RESULTS/full.json"
                tail -n 40 "$WORK/full.log" > "$RESULTS/full-tail.log"
                keep_tu_stats full
            fi ;;
        compiler-cache)
            rm -rf "$WORK/ccache"
            for run in cold warm; do
                CCACHE_DIR=$WORK/ccache fa_shim_wheel "ccache-$run" "${TAILORED[@]}" \
                    -C compiler-cache=ccache -C wheel-cache=false
                CCACHE_DIR=$WORK/ccache ccache --print-stats | grep -E "^(direct|preprocessed)_cache_(hit|miss)|^cache_miss" \
                    > "$RESULTS/ccache-$run-stats.txt" || true
            done ;;
        stock-start)
            rm -rf "$WORK/stock" && mkdir -p "$WORK/stock"
            tar xzf "$SDISTS/flash_attn-2.8.3.tar.gz" -C "$WORK/stock"
            if [ "${STOCK_ARCHS:-90}" = default ]; then
                stock_env=(FLASH_ATTENTION_FORCE_BUILD=TRUE)
            else
                stock_env=(FLASH_ATTENTION_FORCE_BUILD=TRUE FLASH_ATTN_CUDA_ARCHS="${STOCK_ARCHS:-90}" MAX_JOBS=16)
            fi
            date +%s > "$WORK/stock.start"
            (cd "$WORK/stock/flash_attn-2.8.3" && env "${stock_env[@]}" setsid nohup $PY "$REPO/bench/measure.py" \
                "$WORK/stock.json" -- $PY -m pip wheel -v --no-deps --no-build-isolation \
                --no-index -w "$WORK/stock-w" . > "$WORK/stock.log" 2>&1 < /dev/null &) ;;
        stock-wait)
            for _ in $(seq 1 ${WAIT_STEPS:-54}); do
                [ -f "$WORK/stock.json" ] && break
                sleep 10
            done
            echo "stock: $(grep -o '\[[0-9]*/[0-9]*\]' "$WORK/stock.log" | tail -1) after $(($(date +%s) - $(cat "$WORK/stock.start"))) s"
            ninja_log=$(find "$WORK/stock" -name .ninja_log | head -1)
            [ -n "$ninja_log" ] && cp "$ninja_log" "$RESULTS/stock-ninja-log.txt"
            [ -f "$WORK/stock.json" ] && cp "$WORK/stock.json" "$RESULTS/stock.json" ;;
        *) echo "unknown phase $phase" >&2; exit 2 ;;
    esac
done
for f in "$RESULTS"/*.json; do echo "$(basename "$f"): $(tr -d '\n' < "$f" | sed 's/"command": \[[^]]*\], //')"; done
