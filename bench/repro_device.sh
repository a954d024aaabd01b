#!/usr/bin/env bash
# Issue 25 on the lent H100, in one `device` call (~8 min; results under $OUT): one tailored FA2
# and one tailored FA3 set, each built twice with everything that may vary varied (the scratch
# directory and TMPDIR, the cache directory, the fa-shim checkout's path, the working directory,
# the clock), then their sha256s compared; the second build fills a wheel cache, whose hit is
# then timed (`pip install --force-reinstall`, 3 runs); last, the V-head-dim probes on the
# installed FA3 set, each in its own process (bench/fa3_vhead_probe.py --qk D --v D).
# From fa-shim's root, with .carry/ as for bench/speed_device.sh (sdists/, fa3/, whl/).
set -u
# the H100 image's CXX (/opt/gcc/bin/g++) has only libstdc++.a, which fa-shim refuses (its
# modules crashed on their first error: docs/benchmarks.md): the system compiler instead
IMAGE_CXX=${CXX:-} IMAGE_CC=${CC:-}
case "${CXX:-}" in /opt/gcc/*) export CXX=/usr/bin/g++ CC=/usr/bin/gcc ;; esac
OUT=${OUT:-/tmp/out}
ROOT=$PWD
WORK=/tmp/repro-work
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
if [ -d "$ROOT/.carry/whl" ] && [ ! -d "$WORK/site" ]; then
  python3 -m pip install -q --no-index --no-deps --target "$WORK/site" "$ROOT"/.carry/whl/*.whl
fi
[ -d "$WORK/site" ] && export PYTHONPATH=$WORK/site
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
  git -C "$ROOT" rev-parse HEAD 2>/dev/null; } > "$OUT/machine.txt" 2>&1

# the second checkout: the same files at another path (a copy, as a teammate's clone would be)
COPY=/opt/elsewhere/fa-shim
mkdir -p "$(dirname $COPY)" && cp -a "$ROOT" "$COPY"

FA2_SET=(-C sdist-dir="$ROOT/.carry/sdists" -C cuda-archs=90 -C head-dims=128 -C dtypes=bf16
  -C forward-only=true -C disable=dropout,alibi,softcap,local)
FA3_SET=(-C fa3-source-dir="$ROOT/.carry/fa3" -C head-dims=128 -C dtypes=bf16 -C forward-only=true
  -C disable=fp8,split,paged-kv,appendkv,local,softcap,packgqa,varlen,cluster)

build() {  # RUN CHECKOUT PROJECT(relative) NAME CACHE-SETTING SETTINGS...
  local run=$1 checkout=$2 project=$3 name=$4 cache=$5; shift 5
  local dir=$WORK/$run
  mkdir -p "$dir/tmp" "$dir/cwd" "$dir/out-$name"
  local start=$(date +%s)
  (cd "$dir/cwd" && TMPDIR=$dir/tmp python3 -m pip wheel -v --no-deps --no-build-isolation \
    --no-index -w "$dir/out-$name" "$checkout/$project" -C compiler-cache=none \
    -C cache-dir="$dir/cache" -C wheel-cache="$cache" "$@") > "$OUT/$run-$name.log" 2>&1
  echo "$run $name: exit $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/times.txt"
}

build a "$ROOT" . fa2 false "${FA2_SET[@]}"
build a "$ROOT" flash-attn-3 fa3 false "${FA3_SET[@]}"
sleep 5  # another second of the clock for the zip's times to differ, were they taken from it
build b "$COPY" . fa2 true "${FA2_SET[@]}"
build b "$COPY" flash-attn-3 fa3 true "${FA3_SET[@]}"
(cd "$WORK" && sha256sum a/out-*/*.whl b/out-*/*.whl) | tee "$OUT/sha256.txt"
for name in fa2 fa3; do
  one=$(sha256sum "$WORK"/a/out-$name/*.whl | cut -d' ' -f1)
  two=$(sha256sum "$WORK"/b/out-$name/*.whl | cut -d' ' -f1)
  [ "$one" = "$two" ] && echo "$name: identical ($one)" || echo "$name: DIFFERENT ($one, $two)"
done | tee -a "$OUT/times.txt"

# the wheel-cache hit of run b's settings (its cache holds both entries)
hit() {  # CHECKOUT PROJECT NAME SETTINGS...
  local checkout=$1 project=$2 name=$3; shift 3
  for i in 1 2 3; do
    local seconds
    seconds=$( { TIMEFORMAT=%R; time (cd "$WORK/b/cwd" && TMPDIR=$WORK/b/tmp python3 -m pip -v \
      install --force-reinstall --no-deps --no-build-isolation --no-index "$checkout/$project" \
      -C compiler-cache=none -C cache-dir="$WORK/b/cache" "$@" > "$OUT/hit-$name-$i.log" 2>&1); } 2>&1)
    echo "hit $name $i: ${seconds} s; $(grep -c 'wheel cache hit' "$OUT/hit-$name-$i.log") hit" \
      "line(s)" | tee -a "$OUT/times.txt"
  done
}
hit "$COPY" . fa2 "${FA2_SET[@]}"
hit "$COPY" flash-attn-3 fa3 "${FA3_SET[@]}"

# the V-head-dim probe and its neighbours on the installed FA3 set (head dim 128 only); float32,
# an error every build raises, tells a crash of the error path from one of the dispatch
for shape in "128 128 bfloat16" "64 64 bfloat16" "128 128 float32" "128 256 bfloat16" \
  "64 256 bfloat16"; do
  set -- $shape
  (cd /tmp && timeout 60 python3 "$ROOT/bench/fa3_vhead_probe.py" --qk "$1" --v "$2" --dtype "$3") \
    > "$OUT/probe-$1-$2-$3.json" 2> "$OUT/probe-$1-$2-$3.err"
  echo "probe qk=$1 v=$2 $3: exit $?" | tee -a "$OUT/times.txt"
done
if command -v gdb > /dev/null; then  # the native stack of the crash
  (cd /tmp && timeout 120 gdb -batch -ex run -ex bt --args python3 "$ROOT/bench/fa3_vhead_probe.py" \
    --qk 128 --v 256) > "$OUT/probe-gdb.txt" 2>&1
else
  echo "no gdb" > "$OUT/probe-gdb.txt"
fi
rm -rf "$COPY"
