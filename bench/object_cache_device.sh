#!/usr/bin/env bash
# The object cache on a GPU box (issue 40), with the 64-core timings of issue 45 around it, one
# `device` call per phase (each returns inside 10 minutes; the builds run under setsid and
# outlive a call). From fa-shim's root with .carry/ holding sdists/flash_attn-2.8.3.post2.tar.gz,
# fa3/ (../shared/fa3's tarballs) and whl/ (pyelftools). Results under $OUT.
#   bash bench/object_cache_device.sh cold     # FA2 full set, sm_90, cold (bench/big_box_device.sh)
#   bash bench/object_cache_device.sh poll     # wait for it (at most 9 min), then its records
#   bash bench/object_cache_device.sh rebuild  # the same build, wheel cache emptied and object
#                                              # cache kept (what a new torch costs), timed; FA3's
#                                              # full set started; verify and upstream's tests on
#                                              # the reused-object wheel
#   bash bench/object_cache_device.sh fa3      # FA3's full set: progress, or its records
set -uo pipefail
phase=$1
ROOT=$PWD
OUT=${OUT:-/tmp/out}
WORK=/tmp/big-box  # bench/big_box_device.sh's
KEEP=/tmp/lease    # what outlives a call: logs, the FA3 build
mkdir -p "$OUT" "$KEEP"
export CXX=/usr/bin/g++ CC=/usr/bin/gcc PYTHONUNBUFFERED=1 PYTHONPATH=$WORK/site
settings=(-C sdist-dir="$WORK/sdists" -C cuda-archs=90 -C compiler-cache=none
    -C cache-dir="$WORK/cache")

case $phase in
cold)
    cp -a "$ROOT" "$KEEP/src" 2>/dev/null || true  # a checkout no later call replaces
    (cd "$KEEP/src" && setsid bash bench/big_box_device.sh .carry/sdists/flash_attn-2.8.3.post2.tar.gz \
        "$KEEP/cold" >"$KEEP/cold.out" 2>&1; echo "exit $?" >>"$KEEP/cold.out") >/dev/null 2>&1 &
    sleep 60
    tail -n 5 "$KEEP/cold/fa2-full.log"
    ;;
poll)
    for _ in $(seq 108); do grep -q '^exit' "$KEEP/cold.out" 2>/dev/null && break; sleep 5; done
    cat "$KEEP/cold.out"
    cp "$KEEP"/cold/{times.txt,fa2-full-fa-shim.log,fa2-full-tus.jsonl,fa2-full-bound.txt,machine.txt,fa2-full.json} "$OUT/" 2>/dev/null
    du -sh "$WORK/cache/objects" | tee "$OUT/objects-size.txt"
    ls "$WORK/cache/objects" | grep -vc '^\.' | tee -a "$OUT/objects-size.txt"
    ;;
rebuild)
    rm -rf "$WORK/cache/wheels" "$WORK/wheels2"  # the wheel cache emptied, the objects kept
    start=$(date +%s.%N)
    python3 -m pip wheel -v --no-deps --no-build-isolation --no-index -w "$WORK/wheels2" \
        "$KEEP/src" "${settings[@]}" >"$KEEP/rebuild.log" 2>&1
    echo "rebuild: exit $? in $(python3 -c "import time; print(round(time.time() - $start, 1))") s" \
        | tee "$OUT/rebuild.txt"
    grep -o 'fa-shim: .*' "$KEEP/rebuild.log" | grep -E 'object cache|estimate|upstream build|verified|about to' \
        | tee -a "$OUT/rebuild.txt"
    # FA3's full set meanwhile (issue 45): from the same copy, its own cache
    (cd "$KEEP/src" && setsid bash -c 'start=$(date +%s); python3 -m pip wheel -v --no-deps \
        --no-build-isolation --no-index -w /tmp/fa3-out ./flash-attn-3 -C fa3-source-dir=.carry/fa3 \
        -C cache-dir=/tmp/fa3-cache -C compiler-cache=none -C keep-build-dir=true; \
        echo "exit $? after $(($(date +%s) - start)) s"' >"$KEEP/fa3.log" 2>&1 &)
    # the reused-object wheel, installed beside the image's torch: verify, then upstream's tests
    rm -rf /tmp/fa2-site && python3 -m pip install -q --no-deps --no-index --target /tmp/fa2-site \
        "$WORK"/wheels2/*.whl
    (cd /tmp && PYTHONPATH=/tmp/fa2-site:$WORK/site:$KEEP/src python3 -m fa_backend verify flash_attn) \
        >"$OUT/verify.txt" 2>&1
    tail -n 3 "$OUT/verify.txt"
    tests=/tmp/upstream && rm -rf $tests && mkdir -p $tests
    tar -xzf .carry/sdists/flash_attn-2.8.3.post2.tar.gz -O flash_attn-2.8.3.post2/tests/test_flash_attn.py \
        >$tests/test_flash_attn.py
    python3 bench/upstream_selection.py select $tests/test_flash_attn.py --plan full --out $tests/sel \
        --seed 0 --per-function 30 --capability 90 >"$OUT/upstream.txt" 2>&1
    (cd $tests/sel && PYTHONPATH=/tmp/fa2-site timeout -s INT 330 python3 -m pytest -p no:cacheprovider \
        -q -rfE -n 4 --junitxml=$tests/junit.xml test_*.py >$tests/pytest.log 2>&1)
    tail -n 5 $tests/pytest.log | tee -a "$OUT/upstream.txt"
    python3 bench/upstream_selection.py judge --plan-file $tests/sel/plan.json --junit $tests/junit.xml \
        2>&1 | tee -a "$OUT/upstream.txt" | tail -n 12
    ;;
fa3)
    for _ in $(seq 100); do grep -q '^exit' "$KEEP/fa3.log" && break; sleep 5; done
    grep -o 'fa-shim: .*' "$KEEP/fa3.log" | tail -n 40 >"$OUT/fa3-fa-shim.log"
    tail -n 3 "$KEEP/fa3.log"
    find /tmp -maxdepth 4 -name compile-stats.jsonl -newer "$KEEP/rebuild.log" \
        -exec cp {} "$OUT/fa3-tus.jsonl" \; 2>/dev/null
    wc -l "$OUT/fa3-tus.jsonl" 2>/dev/null
    ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
