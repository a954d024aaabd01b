#!/usr/bin/env bash
# Issue 24 ("build at the hardware's limit") on the lent H100, in phases of one `device` call
# each (each under 10 minutes; results under $OUT). From fa-shim's root, with .carry/ holding
#   sdists/flash_attn-2.8.3.tar.gz, fa3/ (the four tarballs of ../shared/fa3), and whl/ (the
#   pyelftools and einops wheels; the image lacks them).
#
#   bash bench/speed_device.sh tailored     # ~7 min: the FA2 training set (bf16, head dim 128,
#       # fwd+bwd, dropout/alibi/softcap/local off; its forward and backward sources in parts)
#       # and the FA3 training set (bf16, head dim 128, fwd+bwd, every feature off but varlen;
#       # per-head-dim units), each a cold timed `pip wheel` with its per-unit records, then
#       # both wheels installed and checked against SDPA (bench/fa3_speed.py, one seqlen)
#   bash bench/speed_device.sh fa3-training # ~4 min: the FA3 training set alone (cold, timed)
#   bash bench/speed_device.sh fa3-slice    # ~9 min: the full FA3 set (233 per-head-dim units)
#       # started as fa-shim plans it, run for 8 minutes and stopped: each unit's time and peak
#       # (the launcher's records), the machine's memory in use every 5 s, the log's plan; then
#       # bench/fa3_full_model.py with those units measured
#   bash bench/speed_device.sh fa3-slice-start; ... fa3-slice-wait SECONDS (repeat);
#   bash bench/speed_device.sh fa3-slice-stop   # the same, longer than one call
#   bash bench/speed_device.sh fa2-full-start   # the FA2 full one-arch build in the background
#   bash bench/speed_device.sh fa2-full-wait [SECONDS]  # (repeat) until it ends (~18 min in
#       # all), then bench/bound_check.py: its compile phase against max(longest, sum/16)
#   bash bench/speed_device.sh memo         # ~8 min: the FA2 training set with and without the
#       # kernel-headers patch, the patched wheel against SDPA, its cache hits with and without
#       # the plan's memo (pipeline/_hit_memo), pip's floor
#   bash bench/speed_device.sh memo-final   # ~3 min: the training set, then those hits only
#   bash bench/speed_device.sh hits-final   # ~4 min: the FA2 training set and its cache hits
#   bash bench/speed_device.sh batch-start [batch|final]; bash bench/speed_device.sh batch-wait
#       # a longer sequence in the background (see the two phases below), its results as
#       # $OUT/results.tgz
#
# Output per build NAME: NAME.json (bench/measure.py: wall, peak RSS of the tree), NAME.log
# (pip -v), NAME-tus.jsonl (the launcher's records), NAME-fa-shim.log (fa-shim's lines).
# Afterwards, on the workstation: bench/unit_table.py refreshes the release tables from the
# *-tus.jsonl files; bench/tu_summary.py DIR --cores 16 tabulates them.
set -u
# the H100 image's CXX (/opt/gcc/bin/g++) has only libstdc++.a, which fa-shim refuses (its
# modules crashed on their first error: docs/benchmarks.md): the system compiler instead
IMAGE_CXX=${CXX:-} IMAGE_CC=${CC:-}
case "${CXX:-}" in /opt/gcc/*) export CXX=/usr/bin/g++ CC=/usr/bin/gcc ;; esac
phase=${1:?phase: tailored, fa3-slice, fa2-full-start or fa2-full-wait}
OUT=${OUT:-/tmp/out}
ROOT=$PWD
WORK=/tmp/speed-work
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1 XDG_CACHE_HOME=$WORK/xdg
if [ -d "$ROOT/.carry/whl" ] && [ ! -d "$WORK/site" ]; then
  python3 -m pip install -q --no-index --no-deps --target "$WORK/site" "$ROOT"/.carry/whl/*.whl
fi
[ -d "$WORK/site" ] && export PYTHONPATH=$WORK/site
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; free -g | head -2
  git -C "$ROOT" rev-parse HEAD 2>/dev/null; } > "$OUT/machine-$phase.txt" 2>&1

FA3_TRAINING=(-C head-dims=128 -C dtypes=bf16
  -C disable=fp8,split,paged-kv,appendkv,local,softcap,packgqa,cluster)
FA2_TRAINING=(-C head-dims=128 -C dtypes=bf16 -C disable=dropout,alibi,softcap,local)
COMMON=(-C compiler-cache=none -C wheel-cache=false -C keep-build-dir=true -C cache-dir="$WORK/cache")

wheel() {  # NAME PROJECT SETTINGS...: one cold timed pip wheel, its records kept
  local name=$1 project=$2; shift 2
  python3 "$ROOT/bench/measure.py" "$OUT/$name.json" -- python3 -m pip wheel -v --no-deps \
    --no-build-isolation --no-index -w "$WORK/w-$name" "$project" "${COMMON[@]}" "$@" \
    > "$OUT/$name.log" 2>&1
  echo "$name: exit $? $(cat "$OUT/$name.json" 2>/dev/null)" | tee -a "$OUT/times.txt"
  grep -o "fa-shim: .*" "$OUT/$name.log" > "$OUT/$name-fa-shim.log"
  keep_records "$name"
}

keep_records() {  # NAME: the kept build directory's launcher records into $OUT
  local kept
  kept=$(grep -o "kept the build directory [^ ]*" "$OUT/$1.log" | tail -1 | cut -d' ' -f5)
  [ -n "$kept" ] || return 0
  find "$kept" -name compile-stats.jsonl -exec cp {} "$OUT/$1-tus.jsonl" \;
  rm -rf "$kept"
}

PROBE_SET=(-C head-dims=128 -C dtypes=bf16 -C forward-only=true
  -C disable=fp8,split,paged-kv,appendkv,local,softcap,packgqa,varlen,cluster)
FA2_SET=(-C sdist-dir="$ROOT/.carry/sdists" -C cuda-archs=90 "${FA2_TRAINING[@]}")

crash() {  # NAME: build the FA3 probe set, install it, its float32 error under the handler
  local name=$1
  wheel "$name" "$ROOT/flash-attn-3" -C fa3-source-dir="$ROOT/.carry/fa3" "${PROBE_SET[@]}"
  python3 -m pip install -q --no-deps --no-index --force-reinstall "$WORK"/w-"$name"/*.whl \
    > "$OUT/$name-install.log" 2>&1
  for path in raw func; do
    (cd /tmp && LD_PRELOAD=$WORK/segv_backtrace.so timeout 120 python3 \
      "$ROOT/bench/fa3_error_probe.py" $path) > "$OUT/$name-$path.txt" 2>&1
    echo "$name $path: exit $? $(grep -h '^raised\|^no error' "$OUT/$name-$path.txt")" | tee -a "$OUT/times.txt"
    python3 "$ROOT/bench/symbolize.py" "$OUT/$name-$path.txt" > "$OUT/$name-$path-named.txt" 2>&1
  done
}

hits() {  # CHECKOUT SUFFIX SETTINGS...: 3 timed cache hits, 3 of pip alone, one split by hook
  local checkout=$1 suffix=$2; shift 2
  for i in 1 2 3; do
    seconds=$( { TIMEFORMAT=%R; time (cd /tmp && python3 -m pip install -v \
      --log "$OUT/hit$suffix-$i.piplog" --force-reinstall --no-deps --no-build-isolation \
      --no-index "$checkout" -C compiler-cache=none -C cache-dir="$WORK/cache" "$@" \
      > "$OUT/hit$suffix-$i.log" 2>&1); } 2>&1)
    echo "hit$suffix $i: $seconds s; $(grep -c 'wheel cache hit' "$OUT/hit$suffix-$i.log") hit line(s)" | tee -a "$OUT/times.txt"
  done
  for i in 1 2 3; do  # pip's floor: the same wheel installed as a file, no build backend at all
    seconds=$( { TIMEFORMAT=%R; time (cd /tmp && python3 -m pip install --force-reinstall --no-deps \
      --no-index "$WORK"/cache/wheels/flash_attn-*.whl > /dev/null 2>&1); } 2>&1)
    echo "pip floor$suffix $i: $seconds s" | tee -a "$OUT/times.txt"
  done
  python3 "$ROOT/bench/hit_profile.py" "$checkout" "$OUT/hit$suffix-profile" -C compiler-cache=none \
    -C cache-dir="$WORK/cache" "$@" > "$OUT/hit$suffix-profile.txt" 2>&1
}

hit_rounds() {  # CHECKOUT SETTINGS...: 7 rounds (the first a warm-up) of a cache hit answered
  # from the memo, one planned again (the memos removed first) and pip's floor, interleaved so
  # that the machine's drift falls on all three alike
  local checkout=$1 i kind seconds; shift
  for i in 0 1 2 3 4 5 6; do
    for kind in memo planned floor; do
      [ $kind = planned ] && rm -rf "$WORK/cache/hits"
      if [ $kind = floor ]; then
        cmd=(python3 -m pip install --force-reinstall --no-deps --no-index "$WORK"/cache/wheels/flash_attn-*.whl)
      else
        cmd=(python3 -m pip install -v --force-reinstall --no-deps --no-build-isolation --no-index
          "$checkout" -C compiler-cache=none -C cache-dir="$WORK/cache" "$@")
      fi
      seconds=$( { TIMEFORMAT=%R; time (cd /tmp && "${cmd[@]}" > "$OUT/hit-$kind-$i.log" 2>&1); } 2>&1)
      echo "$kind $i: $seconds s; memo lines $(grep -c "inputs are those of an earlier build" \
        "$OUT/hit-$kind-$i.log"), hit lines $(grep -c 'wheel cache hit' "$OUT/hit-$kind-$i.log")" |
        tee -a "$OUT/times.txt"
    done
  done
  for kind in planned memo; do  # the profile's own key: its first run leaves the memo
    python3 "$ROOT/bench/hit_profile.py" "$checkout" "$OUT/hit-$kind-profile" -C compiler-cache=none \
      -C cache-dir="$WORK/cache" "$@" > "$OUT/hit-$kind-profile.txt" 2>&1
  done
}

check_against_sdpa() {  # the installed wheels' forward and backward against SDPA, both masks
  for causal in causal no-causal; do
    flag=$([ $causal = no-causal ] && echo --no-causal)
    (cd /tmp && python3 "$ROOT/bench/fa3_speed.py" --seqlens 4096 --warmup 2 --repeats 5 $flag \
      --json "$OUT/training-check-$causal.json" > "$OUT/training-check-$causal.md" \
      2> "$OUT/training-check-$causal.err")
    echo "training check ($causal): exit $?" | tee -a "$OUT/times.txt"
  done
}

case $phase in
tailored)
  wheel fa2-training "$ROOT" -C sdist-dir="$ROOT/.carry/sdists" -C cuda-archs=90 "${FA2_TRAINING[@]}"
  wheel fa3-training "$ROOT/flash-attn-3" -C fa3-source-dir="$ROOT/.carry/fa3" "${FA3_TRAINING[@]}"
  python3 -m pip install -q --no-deps --no-index --force-reinstall \
    "$WORK"/w-fa2-training/*.whl "$WORK"/w-fa3-training/*.whl > "$OUT/install.log" 2>&1
  check_against_sdpa
  ;;
fa3-training)  # ~4 min: the FA3 training set alone, cold, with its per-unit records
  wheel fa3-training "$ROOT/flash-attn-3" -C fa3-source-dir="$ROOT/.carry/fa3" "${FA3_TRAINING[@]}"
  ;;
fa3-slice)  # start, 8 minutes, stop: one call
  bash "$ROOT/bench/speed_device.sh" fa3-slice-start
  bash "$ROOT/bench/speed_device.sh" fa3-slice-wait 480
  bash "$ROOT/bench/speed_device.sh" fa3-slice-stop
  ;;
fa3-slice-start)  # the full FA3 set as fa-shim plans it, in the background, and the machine's
  # memory in use every 5 s; in a session of its own, with SIGINT at its default (a background
  # job's is ignored): the stop is fa-shim's own Ctrl-C path, which stops the build's group too
  # from a copy of the checkout, as fa2-full-start; SLICE_SETTINGS adds settings (`-C fa3-group=5`)
  rm -rf "$WORK"/slice.* "$WORK/fa3-slice-memory.txt" "$WORK/fa3-slice-src"
  cp -a "$ROOT" "$WORK/fa3-slice-src"
  python3 - "$WORK/slice.pid" python3 -m pip wheel -v --no-deps --no-build-isolation --no-index \
    -w "$WORK/w-full3" "$WORK/fa3-slice-src/flash-attn-3" \
    -C fa3-source-dir="$WORK/fa3-slice-src/.carry/fa3" "${COMMON[@]}" ${SLICE_SETTINGS:-} \
    > "$WORK/fa3-slice.log" 2>&1 <<'PY'
import signal, subprocess, sys
proc = subprocess.Popen(sys.argv[2:], start_new_session=True, stdin=subprocess.DEVNULL,
                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
open(sys.argv[1], "w").write(str(proc.pid))
PY
  date +%s > "$WORK/slice.start"
  (setsid bash -c 'start=$(cat "$1/slice.start"); while [ ! -f "$1/slice.stopped" ]; do
    echo "$(( $(date +%s) - start )) $(free -b | awk "/^Mem:/ {print \$3}")" >> "$1/fa3-slice-memory.txt"
    sleep 5; done' _ "$WORK" > /dev/null 2>&1 < /dev/null &)
  ;;
fa3-slice-wait)  # `fa3-slice-wait SECONDS`: let the slice run on
  sleep "${2:?seconds}"
  echo "fa3-slice: $(( $(date +%s) - $(cat "$WORK/slice.start") )) s, $(cat $(find /tmp -maxdepth 3 -name compile-stats.jsonl) 2>/dev/null | grep -v '"source": "?"' | grep -c '"exit": 0') units done"
  ;;
fa3-slice-stop)  # stop the slice, its records and the model with them into $OUT
  ran=$(( $(date +%s) - $(cat "$WORK/slice.start") ))
  kill -INT -- -"$(cat "$WORK/slice.pid")" 2>/dev/null
  sleep 20
  touch "$WORK/slice.stopped"
  # whatever of this build is left (ninja and the compilers run in a group of their own)
  for group in $(ps -eo pgid=,args= | grep "fa-shim-build-" | grep -v grep | awk '{print $1}' | sort -u); do
    kill -9 -- -"$group" 2>/dev/null
  done
  # the kept build directory, or the stable source slot where the stop left it
  for f in /tmp/fa-shim-build-*/src/compile-stats.jsonl /tmp/fa-shim-src-*/src/compile-stats.jsonl; do
    [ -f "$f" ] && cp "$f" "$OUT/fa3-slice-tus.jsonl" && cp "$f.started" "$OUT/fa3-slice-started.jsonl" && break
  done
  cp "$WORK/fa3-slice-memory.txt" "$OUT/"
  grep -o "fa-shim: .*" "$WORK/fa3-slice.log" > "$OUT/fa3-slice-fa-shim.log"
  done_units=$(grep -v '"source": "?"' "$OUT/fa3-slice-tus.jsonl" | grep -c '"exit": 0')
  echo "fa3-slice: $done_units units finished in $ran s" | tee -a "$OUT/times.txt"
  python3 "$ROOT/bench/fa3_full_model.py" --stats "$OUT/fa3-slice-tus.jsonl" \
    --json "$OUT/fa3-model.json" > "$OUT/fa3-model.txt" 2>&1
  rm -rf /tmp/fa-shim-build-*
  ;;
fa2-full-start)  # from a copy of the checkout: the next device call copies the checkout again,
  # and a build running from it lost its compiler launcher meanwhile (lease i, call 2)
  rm -rf "$WORK/fa2-full-src" && cp -a "$ROOT" "$WORK/fa2-full-src"
  (setsid python3 "$ROOT/bench/measure.py" "$WORK/fa2-full.json" -- python3 -m pip wheel -v \
    --no-deps --no-build-isolation --no-index -w "$WORK/w-fa2-full" "$WORK/fa2-full-src" \
    "${COMMON[@]}" -C sdist-dir="$WORK/fa2-full-src/.carry/sdists" > "$WORK/fa2-full.log" 2>&1 \
    < /dev/null &)
  date +%s > "$WORK/fa2-full.start"
  ;;
fa2-full-wait)  # `fa2-full-wait [SECONDS]` (default 540)
  for _ in $(seq 1 $(( ${2:-540} / 10 ))); do [ -f "$WORK/fa2-full.json" ] && break; sleep 10; done
  cp "$WORK/fa2-full.log" "$OUT/fa2-full.log"  # this call's $OUT (the start call's is gone)
  echo "fa2-full: $(( $(date +%s) - $(cat "$WORK/fa2-full.start") )) s; $(grep -o 'compiled [0-9]*/[0-9]*' "$OUT/fa2-full.log" | tail -1)"
  if [ ! -f "$WORK/fa2-full.json" ]; then  # still compiling: the units finished so far
    for f in /tmp/fa-shim-src-*/src/compile-stats.jsonl /tmp/fa-shim-build-*/src/compile-stats.jsonl; do
      [ -f "$f" ] && cp "$f" "$OUT/fa2-full-partial-tus.jsonl" && break
    done
  fi
  if [ -f "$WORK/fa2-full.json" ]; then
    cp "$WORK/fa2-full.json" "$OUT/fa2-full.json"
    grep -o "fa-shim: .*" "$OUT/fa2-full.log" > "$OUT/fa2-full-fa-shim.log"
    keep_records fa2-full
    python3 "$ROOT/bench/bound_check.py" "$OUT/fa2-full-tus.jsonl" --cores 16 \
      --wall-json "$OUT/fa2-full.json" | tee "$OUT/fa2-full-bound.txt"
  fi
  ;;
batch-start)  # `batch-start [PHASE]`: PHASE (default batch) in the background; it outlives this
  # call, results in $WORK/out
  rm -rf "$WORK/out" && mkdir -p "$WORK/out"
  (OUT=$WORK/out setsid bash "$ROOT/bench/speed_device.sh" "${2:-batch}" > "$WORK/out/batch.log" \
    2>&1 < /dev/null &)
  ;;
batch-wait)  # (repeat) until the batch ends or 9 minutes pass; what it has so far, as one
  # tarball in $OUT (the device returns a limited number of files)
  for _ in $(seq 1 108); do [ -f "$WORK/out/batch.done" ] && break; sleep 5; done
  tar czf "$OUT/results.tgz" -C "$WORK/out" .
  cat "$WORK/out/times.txt" 2>/dev/null
  ;;
batch)  # ~10 min (2026-11-25, lease c): the FA3 error crash's native stack, the FA2 training
  # set whole and in 2 parts, the cache hit split by hook. Lease c built with the image's CXX,
  # which fa-shim now refuses: run today, the probe set is built with the system g++ (above)
  { lscpu; ls /usr/bin/ | grep -E '^(gcc|g\+\+)(-[0-9]+)?$'; c++ --version | head -1; } \
    > "$OUT/machine-batch.txt" 2>&1
  gcc -shared -fPIC -O0 -g -o "$WORK/segv_backtrace.so" "$ROOT/bench/segv_backtrace.c"
  crash fa3-crash
  COMMON=(-C compiler-cache=none -C wheel-cache=true -C keep-build-dir=true -C cache-dir="$WORK/cache")
  wheel fa2-whole "$ROOT" "${FA2_SET[@]}" -C tu-parts=1
  hits "$ROOT" "" "${FA2_SET[@]}" -C tu-parts=1
  COMMON=(-C compiler-cache=none -C wheel-cache=false -C keep-build-dir=true -C cache-dir="$WORK/cache")
  wheel fa2-parts2 "$ROOT" "${FA2_SET[@]}" -C tu-parts=2
  touch "$OUT/batch.done"
  ;;
final)  # ~7 min (lease d): the image's own CXX refused before compiling (its libstdc++ is
  # static), the FA3 probe set built with the system g++ raising its errors, the FA2 training
  # set with fa-shim's default parts, and its cache hit from this checkout and from a writable
  # clone (bytecode cached, as in a user's clone)
  { echo "CXX=$IMAGE_CXX CC=$IMAGE_CC"; "${IMAGE_CXX:-c++}" -print-file-name=libstdc++.so; } \
    > "$OUT/final-env.txt" 2>&1
  CXX=${IMAGE_CXX:-c++} CC=${IMAGE_CC:-cc} wheel fa3-image-cxx "$ROOT/flash-attn-3" \
    -C fa3-source-dir="$ROOT/.carry/fa3" "${PROBE_SET[@]}"
  grep -c "links libstdc++ statically" "$OUT/fa3-image-cxx.log" | sed 's/^/refusal lines: /' | tee -a "$OUT/times.txt"
  gcc -shared -fPIC -O0 -g -o "$WORK/segv_backtrace.so" "$ROOT/bench/segv_backtrace.c"
  crash fa3-system-gxx
  COMMON=(-C compiler-cache=none -C wheel-cache=true -C keep-build-dir=true -C cache-dir="$WORK/cache")
  wheel fa2-default "$ROOT" "${FA2_SET[@]}"
  hits "$ROOT" "" "${FA2_SET[@]}"
  rm -rf "$WORK/clone" && cp -a "$ROOT" "$WORK/clone" && rm -rf "$WORK/clone/.carry"
  hits "$WORK/clone" "-clone" "${FA2_SET[@]}"
  touch "$OUT/batch.done"
  ;;
memo)  # ~8 min (lease i): the FA2 training set cold with upstream's flash.h and with the
  # kernel-headers patch (that one into the wheel cache), the patched wheel against SDPA, then
  # its cache hits from the memo against those planned again, and pip's floor (hit_rounds)
  rm -rf "$WORK/upstream-headers" && cp -a "$ROOT" "$WORK/upstream-headers"
  rm -rf "$WORK/upstream-headers/.carry"
  sed -i '/"40-kernel-headers\./d' "$WORK"/upstream-headers/vendored_patches/*/release.toml
  wheel fa2-training-upstream-headers "$WORK/upstream-headers" "${FA2_SET[@]}"
  COMMON=(-C compiler-cache=none -C wheel-cache=true -C keep-build-dir=true -C cache-dir="$WORK/cache")
  wheel fa2-training "$ROOT" "${FA2_SET[@]}"
  python3 -m pip install -q --no-deps --no-index --force-reinstall "$WORK"/w-fa2-training/*.whl \
    > "$OUT/install.log" 2>&1
  check_against_sdpa
  { env | grep -E '^PYTHON'; python3 -c 'import sys; print("dont_write_bytecode",
    sys.flags.dont_write_bytecode)'; } > "$OUT/python-env.txt" 2>&1
  hit_rounds "$ROOT" "${FA2_SET[@]}"
  ;;
memo-final)  # ~3 min (lease i's last minutes): the FA2 training set into the wheel cache, then
  # hit_rounds with the memo as it stands (its second look for the toolchain included)
  COMMON=(-C compiler-cache=none -C wheel-cache=true -C keep-build-dir=true -C cache-dir="$WORK/cache")
  wheel fa2-training "$ROOT" "${FA2_SET[@]}"
  hit_rounds "$ROOT" "${FA2_SET[@]}"
  ;;
hits-final)  # ~4 min (lease e, after the FA2 full build): whether this image's Python writes
  # bytecode, the FA2 training set with the wheel cache, its hits from the checkout, from a
  # writable clone, and from that clone with PYTHONDONTWRITEBYTECODE unset (as on most machines)
  { env | grep -E '^PYTHON'; python3 -c 'import sys; print("dont_write_bytecode",
    sys.flags.dont_write_bytecode, "pycache_prefix", sys.pycache_prefix)'; } > "$OUT/python-env.txt" 2>&1
  COMMON=(-C compiler-cache=none -C wheel-cache=true -C keep-build-dir=true -C cache-dir="$WORK/cache")
  wheel fa2-default "$ROOT" "${FA2_SET[@]}"
  hits "$ROOT" "" "${FA2_SET[@]}"
  rm -rf "$WORK/clone" && cp -a "$ROOT" "$WORK/clone" && rm -rf "$WORK/clone/.carry"
  hits "$WORK/clone" "-clone" "${FA2_SET[@]}"
  (unset PYTHONDONTWRITEBYTECODE; hits "$WORK/clone" "-pyc" "${FA2_SET[@]}")
  find "$WORK/clone/fa_backend" -name '*.pyc' | wc -l | sed 's/^/bytecode files in the clone: /' | tee -a "$OUT/times.txt"
  ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
