#!/usr/bin/env bash
# Peak disk use of one fa-shim build: the build's scratch (TMPDIR/fa-shim-build-*), sampled every
# 5 s while `pip wheel` runs in the background (its own session: it outlives the caller).
#   bench/scratch_peak.sh start DIR [pip wheel options...]   start the build, logs under DIR
#   bench/scratch_peak.sh wait DIR [SECONDS]                 wait for it, print the peak
set -euo pipefail
mode=$1 dir=$(realpath -m "$2"); shift 2
case $mode in
start)
    mkdir -p "$dir/tmp" "$dir/out"
    export TMPDIR=$dir/tmp
    setsid bash -c 'python3 -m pip wheel --no-build-isolation --no-deps -v -w "$0/out" . "$@" \
        >"$0/build.log" 2>&1; echo $? >"$0/build.rc"' "$dir" "$@" </dev/null &
    setsid bash -c 'while [ ! -f "$0/build.rc" ]; do
        echo "$(date +%s) $(du -sb "$0/tmp" | cut -f1)" >>"$0/du.log"; sleep 5; done' "$dir" \
        </dev/null &
    ;;
wait)
    deadline=$((SECONDS + ${1:-540}))
    while [ ! -f "$dir/build.rc" ] && [ $SECONDS -lt "$deadline" ]; do sleep 5; done
    [ -f "$dir/build.rc" ] || { echo "still building"; exit 0; }
    echo "build exit status $(cat "$dir/build.rc")"
    sort -k2 -n "$dir/du.log" | tail -1 | awk '{printf "scratch peak %.2f GB\n", $2 / 1e9}'
    ;;
esac
