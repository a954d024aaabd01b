#!/usr/bin/env bash
# Build-time benchmark (issue "Build speed"), on the GPU machine, from the repository root:
#   RESULTS=dir bench/build_bench.sh PHASE...
# Phases:
#   tailored   fa-shim tailored builds, timed cold (empty caches): hdim128+bf16+forward-only
#              (this seeds the wheel cache), then the same with upstream's five DISABLE switches
#   cache-hit  the first tailored build again: a wheel cache hit
#   stock-start / stock-wait   upstream's own build, FORCE_BUILD, FLASH_ATTN_CUDA_ARCHS=90,
#              MAX_JOBS=16 (what the issue measured), in the background; wait polls it
# Each timing is bench/measure.py's JSON (wall time, peak RSS of the process tree) in $RESULTS.
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

fa_shim_wheel() {  # NAME SETTINGS...: one timed pip wheel of fa-shim
    local name=$1; shift
    (cd "$WORK" && $PY "$REPO/bench/measure.py" "$RESULTS/$name.json" -- \
        $PY -m pip wheel -v --no-deps --no-build-isolation --no-index -w "$WORK/w-$name" "$REPO" \
        -C sdist-dir="$SDISTS" -C cache-dir="$CACHE" -C compiler-cache=none "$@" > "$WORK/$name.log" 2>&1) || { tail -30 "$WORK/$name.log"; return 1; }
    grep -E "fa-shim: (CUDA arch|[0-9]+ compile job|wheel cache hit|built|verified)" "$WORK/$name.log" || true
}

for phase in "$@"; do
    case $phase in
        tailored)
            fa_shim_wheel tailored "${TAILORED[@]}"
            fa_shim_wheel tailored-disable "${TAILORED[@]}" \
                -C disable=dropout,alibi,softcap,local,uneven_k ;;
        cache-hit)
            fa_shim_wheel cache-hit "${TAILORED[@]}" ;;
        stock-start)
            rm -rf "$WORK/stock" && mkdir -p "$WORK/stock"
            tar xzf "$SDISTS/flash_attn-2.8.3.tar.gz" -C "$WORK/stock"
            (cd "$WORK/stock/flash_attn-2.8.3" && FLASH_ATTENTION_FORCE_BUILD=TRUE \
                FLASH_ATTN_CUDA_ARCHS=90 MAX_JOBS=16 setsid nohup $PY "$REPO/bench/measure.py" \
                "$WORK/stock.json" -- $PY -m pip wheel -v --no-deps --no-build-isolation \
                --no-index -w "$WORK/stock-w" . > "$WORK/stock.log" 2>&1 &) ;;
        stock-wait)
            for _ in $(seq 1 ${WAIT_STEPS:-54}); do
                [ -f "$WORK/stock.json" ] && break
                sleep 10
            done
            grep -c "^\[[0-9]*/73\]" "$WORK/stock.log" || true
            [ -f "$WORK/stock.json" ] && cp "$WORK/stock.json" "$RESULTS/stock.json" ;;
        *) echo "unknown phase $phase" >&2; exit 2 ;;
    esac
done
for f in "$RESULTS"/*.json; do echo "$(basename "$f"): $(tr -d '\n' < "$f" | sed 's/"command": \[[^]]*\], //')"; done
