#!/usr/bin/env bash
# GPU acceptance of fa-shim on the real flash-attn 2.8.3, in phases that each end well inside a
# 10-minute remote command. See docs/acceptance.md for the device invocation.
#
#   bench/gpu_acceptance.sh PHASE [PHASE...]
#
# Phases (run from the repository root; each prints the machine and times itself):
#   machine     the machine: GPUs, cores, memory, nvcc, torch, pytest, fa-shim doctor
#   start-full  start the full build (all kernels, the GPU's arch) in the background with
#               setsid nohup; returns at once
#   status      the full build's progress; returns at once
#   wait-full   wait for the full build, at most until this phase's time is up
#   stop-full   stop a running full build (its process group)
#   tailored    build + install the tailored wheel (head dim 128, bf16, forward only, arch from
#               the visible GPU), verify, direct checks, upstream tests, speed (forward)
#   full-tests  after the full build: verify, upstream test selection, speed table
#   cache-hit   rebuild the full wheel into a fresh environment: fa-shim's wheel cache hit
#   objects     what a new torch costs: the wheel cache emptied, the object cache kept, the full
#               build again into a fresh environment (only the binding compiles), verify and the
#               upstream test selection on that wheel
#   auto        whatever comes next and fits in this phase's time: wait-full, full-tests,
#               cache-hit (call it again until it prints "ALL PHASES DONE")
#
# Environment:
#   RESULTS      where results.md and the logs are copied (the lead: $OUT); default $WORK/results
#   WORK         state that outlives one command on the same machine (builds, envs, logs);
#                default /tmp/fa-acceptance
#   PY           the interpreter with torch (default python3)
#   SDIST_DIR    upstream sdists (default .carry/sdists); WHEELS: wheels to add (default .whl)
#   CUDA_ARCHS   -C cuda-archs of the full build (default: none, fa-shim detects the GPU; if
#                it compiles anything but the GPU's arch, start-full restarts with it named)
#   TAILORED_ARCHS  the same for the tailored build (default none; the phase checks the result)
#   FULL_JOBS, NVCC_THREADS  -C max-jobs / -C nvcc-threads of the full build (default: fa-shim's
#                choice from cores and memory: one job per core, 1 thread, for one arch)
#   FULL_NICE    nice level of the full build (default 10: the tailored phase, run meanwhile,
#                gets the CPU first)
#   PHASE_LIMIT  seconds one invocation may take (default 540: 9 min)
#   SEED, PER_FUNCTION   upstream test selection (default 0, 30 cases per test function)
set -euo pipefail

T0=$(date +%s)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-python3}
WORK=${WORK:-/tmp/fa-acceptance}
RESULTS=${RESULTS:-$WORK/results}
SDIST_DIR=${SDIST_DIR:-$REPO/.carry/sdists}
WHEELS=${WHEELS:-$REPO/.whl}
FA_VERSION=${FA_VERSION:-2.8.3}
PHASE_LIMIT=${PHASE_LIMIT:-540}
SEED=${SEED:-0}
PER_FUNCTION=${PER_FUNCTION:-30}
DEADLINE=$((T0 + PHASE_LIMIT))
SECTIONS=$WORK/sections
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d'; }
[ $# -ge 1 ] || { usage; exit 2; }
for phase in "$@"; do
    case $phase in
        machine | tailored | start-full | status | stop-full | wait-full | full-tests | cache-hit | objects | auto) ;;
        *) echo "unknown phase: $phase" >&2; usage; exit 2 ;;
    esac
done
mkdir -p "$RESULTS" "$WORK" "$SECTIONS"
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi

say() { printf '[%s +%3ss] %s\n' "$(date +%H:%M:%S)" "$(($(date +%s) - T0))" "$*"; }
left() { echo $((DEADLINE - $(date +%s))); }
die() { say "ERROR: $*"; publish; exit 1; }
md() { printf '%s\n' "$@" >> "$SECTION"; }  # append lines to the current phase's section

# ------------------------------------------------------------------------------------ helpers

gpu_arch() {  # the first GPU's compute capability as an arch: 90 for an H100/H200
    nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .'
}

machine_brief() {
    say "machine: $(hostname), $(nproc) cores, $(free -g | awk '/^Mem:/{print $2 " GiB, " $7 " GiB available"}')"
    nvidia-smi -L 2>&1 | sed 's/^/    /' || true
    say "nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not on PATH')"
    say "torch: $($PY -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -1)"
}

# Wheels carried in .whl/ (pyelftools, for fa-shim's verify and build requirements; a newer
# setuptools if doctor asks for one) go into one directory that every acceptance environment
# puts ahead of $PY's site-packages.
extra_site() {
    local site=$WORK/site-extra
    if [ ! -d "$site" ]; then
        mkdir -p "$site"
        if compgen -G "$WHEELS/*.whl" >/dev/null; then
            $PY -m pip install -q --no-index --no-deps --no-compile --target "$site" "$WHEELS"/*.whl >&2
        fi
    fi
    echo "$site"
}

# An environment of its own for each wheel: a venv whose import path continues into $PY's
# (torch, pytest, build tools) through a .pth file, so the tailored and the full flash-attn never
# replace each other and $PY's own environment stays as it was.
make_env() {
    local env=$WORK/env-$1 site purelib
    site=$(extra_site)
    if [ ! -x "$env/bin/python" ]; then
        $PY -m venv --without-pip "$env"
    fi
    purelib=$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    {
        echo "$site"
        $PY - <<'EOF'
import os, sys, sysconfig
std = {os.path.normpath(sysconfig.get_path(k)) for k in ("stdlib", "platstdlib")}
for p in sys.path[1:]:
    if p and os.path.isdir(p) and os.path.normpath(p) not in std and os.path.basename(p) != "lib-dynload":
        print(p)
EOF
    } > "$purelib/_fa_acceptance_base.pth"
    echo "$env"
}

# pip install of this checkout into ENV with fa-shim settings; output to LOG; returns pip's status.
pip_build() {
    local env=$1 log=$2 limit=$3
    shift 3
    (cd "$WORK" && timeout -k 10 "$limit" "$env/bin/python" -m pip install -v \
        --no-build-isolation --no-index "$REPO" \
        -C sdist-dir="$SDIST_DIR" -C cache-dir="$WORK/fa-shim-cache" "$@") >> "$log" 2>&1
}

fa_shim() {  # python -m fa_backend ... in ENV, from outside the checkout
    local env=$1
    shift
    (cd "$WORK" && PYTHONPATH=$REPO "$env/bin/python" -m fa_backend "$@")
}

provenance_summary() {  # one markdown table of the installed wheel's provenance
    (cd "$WORK" && "$1/bin/python" - <<'EOF'
import glob, json, os, sysconfig
site = sysconfig.get_paths()["purelib"]
(info,) = glob.glob(os.path.join(site, "flash_attn-*.dist-info"))
prov = json.load(open(os.path.join(info, "fa_shim_provenance.json")))
wheel = open(os.path.join(info, "WHEEL")).read()
tag = [l.split(": ", 1)[1] for l in wheel.splitlines() if l.startswith("Tag: ")]
ks = prov.get("kernel_set") or {}
rows = [
    ("wheel version", prov.get("wheel_version")),
    ("tag", ", ".join(tag)),
    ("torch", f"{prov['torch']['version']} (CUDA {prov['torch']['cuda']}, "
              f"cxx11 ABI {prov['torch']['cxx11_abi']}, {prov['torch'].get('cxx_std')})"),
    ("nvcc", (prov.get("nvcc") or {}).get("version")),
    ("cuda archs", ", ".join(prov.get("cuda_archs") or [])),
    ("kernel set", f"{ks.get('kernel_set')} (head dims {ks.get('head_dims')}, dtypes "
                   f"{ks.get('dtypes')}, backward {ks.get('backward')})"),
    ("compiled", f"{prov['compile_commands']['nvcc']} kernel TUs + "
                 f"{prov['compile_commands']['cxx']} C++ TU"),
    ("patches", ", ".join(p["name"] for p in prov.get("patches", []))),
]
print("| provenance | |\n|---|---|")
for k, v in rows:
    print(f"| {k} | {v} |")
print("\nARCHS=" + ",".join(prov.get("cuda_archs") or []))
EOF
    )
}

upstream_tests() {  # ENV PLAN NAME: select, run, judge; appends to upstream-tests.txt
    local env=$1 plan=$2 name=$3 dir=$WORK/upstream-$3 limit rc=0
    rm -rf "$dir"
    mkdir -p "$WORK/upstream"
    [ -f "$WORK/upstream/test_flash_attn.py" ] || tar -xzf "$SDIST_DIR/flash_attn-$FA_VERSION.tar.gz" \
        -O "flash_attn-$FA_VERSION/tests/test_flash_attn.py" > "$WORK/upstream/test_flash_attn.py"
    {
        echo "=== upstream tests: $name (plan $plan, seed $SEED) ==="
        "$env/bin/python" "$REPO/bench/upstream_selection.py" select "$WORK/upstream/test_flash_attn.py" \
            --plan "$plan" --out "$dir" --seed "$SEED" --per-function "$PER_FUNCTION" \
            --capability "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' ')"
    } >> "$WORK/upstream-tests.txt" 2>&1
    local files
    files=$(cd "$dir" && ls test_*.py)
    limit=$(($(left) - ${4:-60}))
    [ "$limit" -gt 30 ] || { say "no time left for upstream tests ($name)"; return 1; }
    say "upstream tests ($name): $(cat "$dir"/ids-*.txt | wc -l) cases, at most ${limit}s"
    local t
    t=$(date +%s)
    # From the selection's own directory: flash_attn resolves to the environment's site-packages.
    # SIGINT at the time limit: pytest stops, and still writes the JUnit XML of what ran.
    (cd "$dir" && timeout -s INT -k 30 "$limit" "$env/bin/python" -m pytest -p no:cacheprovider -q -rfE \
        --junitxml="$dir/junit.xml" $files) > "$dir/pytest.log" 2>&1 || rc=$?
    local took=$(($(date +%s) - t))
    {
        echo "--- pytest ($took s, exit status $rc): last lines"
        tail -n 15 "$dir/pytest.log"
        echo "--- verdict"
    } >> "$WORK/upstream-tests.txt"
    local verdict=0
    if [ -f "$dir/junit.xml" ]; then
        "$env/bin/python" "$REPO/bench/upstream_selection.py" judge --plan-file "$dir/plan.json" \
            --junit "$dir/junit.xml" > "$dir/verdict.txt" 2>&1 || verdict=$?
    else
        echo "no junit.xml: pytest did not finish (exit status $rc)" > "$dir/verdict.txt"; verdict=1
    fi
    cat "$dir/verdict.txt" >> "$WORK/upstream-tests.txt"
    echo >> "$WORK/upstream-tests.txt"
    md "" "Upstream tests ($name: plan $plan, seed $SEED, $(cat "$dir"/ids-*.txt | wc -l) cases;" \
        "$took s; the selection and any failures: upstream-tests.txt):" ""
    grep '^|' "$dir/verdict.txt" >> "$SECTION" || true
    md "" "$(grep -E 'every selected case|broke their expectation' "$dir/verdict.txt" || echo 'no verdict')"
    return "$verdict"
}

speed() {  # ENV NAME [speed.py args]
    local env=$1 name=$2
    shift 2
    local out=$WORK/speed-$name.json
    [ "$(left)" -gt 40 ] || { say "no time left for the speed table ($name)"; return 1; }
    (cd "$WORK" && timeout -k 10 $(($(left) - 10)) "$env/bin/python" "$REPO/bench/speed.py" \
        --label "$name" --out "$out" --markdown "$WORK/speed-$name.md" "$@") \
        >> "$WORK/speed-$name.log" 2>&1
}

full_running() { bg_running full; }

publish() {  # results.md from the sections, the logs; at most 8 files into $RESULTS
    {
        echo "# fa-shim GPU acceptance: flash-attn $FA_VERSION"
        echo
        echo "Phases run so far (UTC): $(cat "$WORK/phases.txt" 2>/dev/null | tr '\n' ';')"
        echo
        for section in "$SECTIONS"/*.md; do
            [ -f "$section" ] && { cat "$section"; echo; }
        done
    } > "$RESULTS/results.md"
    if [ -f "$WORK/tailored-build.log" ]; then  # the build's end, then the tests' output
        { tail -n 300 "$WORK/tailored-build.log"; cat "$WORK/tailored.log" 2>/dev/null; } > "$RESULTS/tailored.log"
    fi
    [ -f "$WORK/full-build.log" ] && tail -n 3000 "$WORK/full-build.log" > "$RESULTS/full-build.log"
    [ -f "$WORK/full-tests.log" ] && cp "$WORK/full-tests.log" "$RESULTS/full-tests.log"
    [ -f "$WORK/cache-hit.log" ] && cp "$WORK/cache-hit.log" "$RESULTS/cache-hit.log"
    [ -f "$WORK/objects.log" ] && tail -n 400 "$WORK/objects.log" > "$RESULTS/objects.log"
    [ -f "$WORK/upstream-tests.txt" ] && cp "$WORK/upstream-tests.txt" "$RESULTS/upstream-tests.txt"
    "$PY" - "$WORK" "$RESULTS/speed.json" <<'EOF' || true
import glob, json, os, sys
work, out = sys.argv[1], sys.argv[2]
doc = {os.path.basename(p)[6:-5]: json.load(open(p)) for p in sorted(glob.glob(work + "/speed-*.json"))}
if doc:
    json.dump(doc, open(out, "w"), indent=1)
EOF
    say "results in $RESULTS: $(cd "$RESULTS" && ls | tr '\n' ' ')"
}

begin() {  # PHASE: its section file and log
    PHASE=$1
    echo "$(date -u +%H:%M:%S) $PHASE" >> "$WORK/phases.txt"
    say "=== phase $PHASE (at most $(left) s) ==="
    machine_brief
}

# --------------------------------------------------------------------------------------- phases

phase_machine() {
    begin machine
    SECTION=$SECTIONS/00-machine.md
    local env
    env=$(make_env tailored)
    {
        echo "## Machine"
        echo
        echo '```'
        nvidia-smi -L 2>&1
        nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv 2>&1
        echo "cores: $(nproc)"
        free -g
        nvcc --version 2>&1 | tail -2
        $PY -c 'import sys, torch; print("python", sys.version.split()[0], sys.executable); print("torch", torch.__version__, "CUDA", torch.version.cuda, "cxx11abi", torch._C._GLIBCXX_USE_CXX11_ABI)' 2>&1 | grep -v Warning
        $PY -m pytest --version 2>&1
        $PY -c 'import flash_attn; print("flash_attn already in the base environment:", flash_attn.__file__)' 2>/dev/null \
            || echo "no flash_attn in the base environment"
        echo '```'
        echo
        echo "fa-shim doctor (in the acceptance environment):"
        echo
        echo '```'
        fa_shim "$env" doctor 2>&1 || true
        echo '```'
        echo
    } > "$SECTION"
    cat "$SECTION"
}

# A build in its own process session (setsid): it outlives the command that starts it (the device
# keeps such processes until the machine goes back), so no build is ever cut by a call's limit.
#   launch_bg NAME ENV NICE [pip -C settings...]: $WORK/NAME.{pid,start,settings,seconds,rc},
#   output in $WORK/NAME-build.log
launch_bg() {
    local name=$1 env=$2 niceness=$3 waited=0
    shift 3
    : > "$WORK/$name-build.log"
    rm -f "$WORK/$name.rc" "$WORK/$name.seconds" "$WORK/$name.pid"
    echo "$*" > "$WORK/$name.settings"
    date +%s > "$WORK/$name.start"
    setsid nohup bash -c '
        work=$0 env=$1 repo=$2 sdists=$3 name=$4 niceness=$5
        shift 5
        echo $$ > "$work/$name.pid"
        t=$(date +%s)
        cd "$work" && nice -n "$niceness" "$env/bin/python" -m pip install -v --no-build-isolation \
            --no-index "$repo" -C sdist-dir="$sdists" -C cache-dir="$work/fa-shim-cache" "$@"
        rc=$?
        echo $(( $(date +%s) - t )) > "$work/$name.seconds"
        echo $rc > "$work/$name.rc"
    ' "$WORK" "$env" "$REPO" "$SDIST_DIR" "$name" "$niceness" "$@" \
        >> "$WORK/$name-build.log" 2>&1 < /dev/null &
    while [ ! -s "$WORK/$name.pid" ] && [ "$waited" -lt 30 ]; do sleep 1; waited=$((waited + 1)); done
}

bg_running() {  # NAME
    [ -f "$WORK/$1.pid" ] && [ ! -f "$WORK/$1.rc" ] && kill -0 "$(cat "$WORK/$1.pid")" 2>/dev/null
}

tailored_pending() {  # its build has ended and its tests have not run yet
    [ -f "$WORK/tailored.rc" ] && [ ! -f "$WORK/tailored.done" ]
}

phase_tailored() {
    begin tailored
    SECTION=$SECTIONS/10-tailored.md
    local env archs=()
    env=$(make_env tailored)
    [ -n "${TAILORED_ARCHS:-}" ] && archs=(-C cuda-archs="$TAILORED_ARCHS")
    if [ ! -f "$WORK/tailored.start" ]; then
        say "tailored build (arch: ${TAILORED_ARCHS:-detected from the GPU}) in the background -> $WORK/tailored-build.log"
        launch_bg tailored "$env" 0 -C head-dims=128 -C dtypes=bf16 -C forward-only=true "${archs[@]}"
    fi
    while bg_running tailored && [ "$(left)" -gt 100 ]; do sleep 5; done
    if bg_running tailored; then
        say "the tailored build is still compiling ($(grep -o 'compiled [0-9]*/[0-9]*' "$WORK/tailored-build.log" | tail -1 || echo 'no progress yet')): auto tests it once it is done"
        publish
        return 0
    fi
    [ -f "$WORK/tailored.rc" ] || die "the tailored build process is gone without an exit status: run tailored again after rm $WORK/tailored.start"
    tailored_tests "$env"
}

tailored_tests() {
    local env=$1 log=$WORK/tailored.log rc=0 t expected
    expected=$(gpu_arch)
    : > "$log"
    echo "## Tailored wheel: head dim 128, bf16, forward only" > "$SECTION"
    md "" "| step | result | seconds |" "|---|---|---|"
    local build_rc took wheel
    build_rc=$(cat "$WORK/tailored.rc")
    took=$(cat "$WORK/tailored.seconds")
    if [ "$build_rc" -ne 0 ]; then
        md "| pip install (tailored) | FAILED (exit status $build_rc, see tailored.log) | $took |"
        tail -n 40 "$WORK/tailored-build.log"
        echo "done" > "$WORK/tailored.done"
        die "tailored build failed"
    fi
    wheel=$(grep -o 'filename=flash_attn-[^ ]*\.whl' "$WORK/tailored-build.log" | tail -1 | cut -d= -f2)
    if grep -q 'wheel cache hit' "$WORK/tailored-build.log"; then  # e.g. build_bench.sh built it
        md "| pip install (tailored) | ok, from fa-shim's wheel cache (built earlier): $wheel | $took |"
    else
        local how="5 TUs compiled"
        full_running && how="$how, beside the full build"
        grep -q 'through the compiler cache' "$WORK/tailored-build.log" && how="$how, through the compiler cache"
        md "| pip install (tailored, $how) | ok: $wheel | $took |"
    fi
    local prov
    prov=$(provenance_summary "$env")
    local built_archs=${prov##*ARCHS=}
    if [ -z "${TAILORED_ARCHS:-}" ]; then
        if [ "$built_archs" = "$expected" ]; then
            md "| arch detection (no cuda-archs given) | ok: compiled sm_$built_archs for the visible GPU | |"
        else
            md "| arch detection (no cuda-archs given) | FAILED: compiled sm_$built_archs, GPU is sm_$expected | |"
            rc=1
        fi
    fi
    t=$(date +%s)
    if fa_shim "$env" verify flash_attn >> "$log" 2>&1; then
        md "| fa-shim verify flash_attn | ok: $(grep '^result:' "$log" | tail -1) | $(($(date +%s) - t)) |"
    else
        md "| fa-shim verify flash_attn | FAILED (tailored.log) | $(($(date +%s) - t)) |"; rc=1
    fi
    t=$(date +%s)
    if (cd "$WORK" && timeout 120 "$env/bin/python" "$REPO/bench/tailored_checks.py" \
        --json "$WORK/tailored-checks.json") >> "$log" 2>&1; then
        md "| direct checks (bench/tailored_checks.py) | ok: $(grep 'tailored checks passed' "$log" | tail -1) | $(($(date +%s) - t)) |"
    else
        md "| direct checks (bench/tailored_checks.py) | FAILED: $(grep 'tailored checks passed' "$log" | tail -1) (tailored.log) | $(($(date +%s) - t)) |"
        rc=1
    fi
    md "" "${prov%ARCHS=*}"
    upstream_tests "$env" tailored tailored 20 || rc=1
    if full_running; then
        say "the full build is compiling: the tailored wheel's speed is measured in full-tests"
        md "" "Speed: measured in full-tests (the full build was compiling during this phase)."
    elif speed "$env" tailored --forward-only; then
        md "" "$(cat "$WORK/speed-tailored.md")"
    else
        md "" "Speed (tailored): FAILED, see speed-tailored.log in the work dir"; rc=1
    fi
    echo "done" > "$WORK/tailored.done"
    publish
    [ "$rc" -eq 0 ] || { say "tailored phase: some checks FAILED"; return 1; }
    say "tailored phase: all checks passed"
}

phase_start_full() {
    begin start-full
    SECTION=$SECTIONS/20-full-build.md
    if full_running; then say "the full build is already running"; phase_status_body; return 0; fi
    if [ -f "$WORK/full.rc" ]; then say "the full build already ran (exit status $(cat "$WORK/full.rc"))"; return 0; fi
    local gpu compiled="" waited=0
    FULL_ENV=$(make_env full)
    gpu=$(gpu_arch)
    FULL_SETTINGS=()
    # Default: no cuda-archs, as a user would run it: fa-shim compiles for the visible GPU.
    [ -n "${CUDA_ARCHS:-}" ] && FULL_SETTINGS+=(-C cuda-archs="$CUDA_ARCHS")
    [ -n "${FULL_JOBS:-}" ] && FULL_SETTINGS+=(-C max-jobs="$FULL_JOBS")
    [ -n "${NVCC_THREADS:-}" ] && FULL_SETTINGS+=(-C nvcc-threads="$NVCC_THREADS")
    launch_bg full "$FULL_ENV" "${FULL_NICE:-10}" "${FULL_SETTINGS[@]}"
    # The arch decision is logged within seconds; a wrong one would cost 4x the time: restart.
    while [ "$waited" -lt 120 ] && ! grep -q 'compiling sm_' "$WORK/full-build.log" && full_running; do
        sleep 3; waited=$((waited + 3))
    done
    compiled=$(grep -o 'compiling sm_.*' "$WORK/full-build.log" | head -1 || true)
    {
        echo "## Full build: all kernels"
        echo
        echo "Started $(date -u +%H:%M:%S) UTC: pip install -v --no-build-isolation . ${FULL_SETTINGS[*]}"
        echo
        echo "- $(grep -o 'fa-shim: CUDA architectures.*' "$WORK/full-build.log" | head -1 || echo 'no arch line in the log')"
        echo "- $(grep -o 'fa-shim: [0-9]* compile job.*' "$WORK/full-build.log" | head -1 || echo 'no jobs line in the log')"
    } > "$SECTION"
    if [ -z "${CUDA_ARCHS:-}" ] && [ -n "$compiled" ] && [ "$compiled" != "compiling sm_$gpu" ]; then
        say "arch detection chose '$compiled' for a sm_$gpu GPU: restarting with -C cuda-archs=$gpu"
        md "- arch detection FAILED: '$compiled' for a sm_$gpu GPU; restarted with -C cuda-archs=$gpu"
        kill -TERM -- "-$(cat "$WORK/full.pid")" 2>/dev/null || true
        sleep 3
        FULL_SETTINGS+=(-C cuda-archs="$gpu")
        launch_bg full "$FULL_ENV" "${FULL_NICE:-10}" "${FULL_SETTINGS[@]}"
        sleep 5
    elif [ -z "${CUDA_ARCHS:-}" ] && [ -n "$compiled" ]; then
        md "- arch detection: ok, $compiled for the visible sm_$gpu GPU (no cuda-archs given)"
    fi
    say "full build started (${FULL_SETTINGS[*]:-default settings}); log: $WORK/full-build.log"
    tail -n 8 "$WORK/full-build.log"
    publish
}

phase_status_body() {
    if [ -f "$WORK/tailored.start" ]; then
        local state tests="not yet"
        if [ -f "$WORK/tailored.rc" ]; then
            state="exit status $(cat "$WORK/tailored.rc") after $(cat "$WORK/tailored.seconds") s"
        elif bg_running tailored; then
            state="running, $(grep -o 'compiled [0-9]*/[0-9]*' "$WORK/tailored-build.log" | tail -1 || echo 'no progress yet')"
        else
            state="gone without an exit status"
        fi
        [ -f "$WORK/tailored.done" ] && tests="run"
        say "tailored build: $state; its tests: $tests"
    fi
    if [ ! -f "$WORK/full.start" ]; then say "no full build started"; return 0; fi
    local elapsed=$(($(date +%s) - $(cat "$WORK/full.start")))
    local progress
    progress=$(grep -o 'compiled [0-9]*/[0-9]*[^"]*' "$WORK/full-build.log" | tail -1 || true)
    if [ -f "$WORK/full.rc" ]; then
        say "full build finished: exit status $(cat "$WORK/full.rc") after $(cat "$WORK/full.seconds") s; last progress: ${progress:-none}"
    elif full_running; then
        say "full build running for ${elapsed} s: ${progress:-no progress line yet}"
    else
        say "full build process is gone without an exit status (machine restarted?)"
    fi
    grep -E 'fa-shim: (warning|error)|OOM|out of memory|retry' "$WORK/full-build.log" | tail -n 5 || true
}

phase_stop_full() {
    begin stop-full
    if full_running; then
        kill -TERM -- "-$(cat "$WORK/full.pid")" 2>/dev/null || true
        sleep 3
        say "full build stopped"
    else
        say "no full build running"
    fi
    rm -f "$WORK/full.pid"
}

phase_status() {
    begin status
    phase_status_body
    publish
}

phase_wait_full() {
    begin wait-full
    [ -f "$WORK/full.start" ] || die "no full build started (run start-full first)"
    while full_running && [ "$(left)" -gt 20 ]; do
        sleep 15
        [ $((($(date +%s) - T0) % 120)) -lt 15 ] && phase_status_body
    done
    phase_status_body
    record_full_build
    publish
}

record_full_build() {
    [ -f "$WORK/full.rc" ] || return 0
    SECTION=$SECTIONS/20-full-build.md
    grep -q '^| pip install (full' "$SECTION" 2>/dev/null && return 0
    local rc seconds wheel
    rc=$(cat "$WORK/full.rc")
    seconds=$(cat "$WORK/full.seconds")
    wheel=$(grep -o 'filename=flash_attn-[^ ]*\.whl' "$WORK/full-build.log" | tail -1 | cut -d= -f2)
    md "" "| step | result | seconds |" "|---|---|---|"
    if [ "$rc" -eq 0 ]; then
        md "| pip install (full, $(grep -o 'compiled [0-9]*/[0-9]*' "$WORK/full-build.log" | tail -1 | cut -d/ -f2) build steps) | ok: $wheel | $seconds |"
    else
        md "| pip install (full) | FAILED (exit status $rc; full-build.log) | $seconds |"
    fi
    grep -E 'fa-shim: (warning|error)' "$WORK/full-build.log" | sed 's/^/    /' >> "$SECTION" || true
}

phase_full_tests() {
    begin full-tests
    SECTION=$SECTIONS/30-full-tests.md
    [ -f "$WORK/full.rc" ] || die "the full build has not finished (status / wait-full)"
    [ "$(cat "$WORK/full.rc")" -eq 0 ] || die "the full build failed: see full-build.log"
    record_full_build
    SECTION=$SECTIONS/30-full-tests.md
    local env=$WORK/env-full log=$WORK/full-tests.log rc=0 t
    : > "$log"
    echo "## Full wheel: verify, upstream tests, speed" > "$SECTION"
    md "" "| step | result | seconds |" "|---|---|---|"
    t=$(date +%s)
    if fa_shim "$env" verify flash_attn >> "$log" 2>&1; then
        md "| fa-shim verify flash_attn | ok: $(grep '^result:' "$log" | tail -1) | $(($(date +%s) - t)) |"
    else
        md "| fa-shim verify flash_attn | FAILED (full-tests.log) | $(($(date +%s) - t)) |"; rc=1
    fi
    local prov
    prov=$(provenance_summary "$env")
    md "" "${prov%ARCHS=*}"
    # leave ~150 s for the speed tables
    upstream_tests "$env" full full 150 || rc=1
    t=$(date +%s)
    if speed "$env" full; then
        md "" "$(cat "$WORK/speed-full.md")" "" "Speed measured in $(($(date +%s) - t)) s."
    else
        md "" "Speed (full): FAILED (speed-full.log in the work dir):" '```' "$(tail -n 5 "$WORK/speed-full.log")" '```'
        rc=1
    fi
    cat "$WORK/speed-full.log" >> "$log" 2>/dev/null || true
    if [ -x "$WORK/env-tailored/bin/python" ] && [ ! -f "$WORK/speed-tailored.json" ] && [ "$(left)" -gt 60 ]; then
        SECTION=$SECTIONS/10-tailored.md
        if speed "$WORK/env-tailored" tailored --forward-only; then
            md "" "$(cat "$WORK/speed-tailored.md")" "" "(measured during full-tests, no build running)"
        fi
        SECTION=$SECTIONS/30-full-tests.md
    fi
    publish
    [ "$rc" -eq 0 ] || { say "full-tests: some checks FAILED"; return 1; }
    say "full-tests: all checks passed"
}

phase_cache_hit() {
    begin cache-hit
    SECTION=$SECTIONS/40-cache-hit.md
    [ "$(cat "$WORK/full.rc" 2>/dev/null)" = 0 ] || die "no successful full build to hit in the cache"
    local env log=$WORK/cache-hit.log rc=0 t
    : > "$log"
    rm -rf "$WORK/env-cache"  # a fresh environment every time: nothing to reinstall over
    env=$(make_env cache)
    t=$(date +%s)
    # the full build's settings, as it recorded them (a restart adds cuda-archs)
    local settings=()
    read -r -a settings < "$WORK/full.settings" || true
    pip_build "$env" "$log" $(($(left) - 20)) "${settings[@]}" || rc=$?
    local took=$(($(date +%s) - t))
    local hit
    hit=$(grep -o 'wheel cache hit: .*' "$log" | tail -1 || true)
    {
        echo "## Wheel cache: the full build's settings again, into a fresh environment"
        echo
        echo "| step | result | seconds |"
        echo "|---|---|---|"
        if [ "$rc" -eq 0 ] && [ -n "$hit" ]; then
            echo "| pip install (same settings) | ok: ${hit%% (fingerprint*} | $took |"
        else
            echo "| pip install (same settings) | FAILED: exit status $rc, ${hit:-no cache hit in the log} | $took |"
            rc=1
        fi
    } > "$SECTION"
    t=$(date +%s)
    if fa_shim "$env" verify flash_attn >> "$log" 2>&1; then
        md "| fa-shim verify (the cached wheel) | ok: $(grep '^result:' "$log" | tail -1) | $(($(date +%s) - t)) |"
    else
        md "| fa-shim verify (the cached wheel) | FAILED (cache-hit.log) | $(($(date +%s) - t)) |"; rc=1
    fi
    echo "cache-hit" > "$WORK/cache-hit.done"
    publish
    return "$rc"
}

phase_objects() {
    begin objects
    SECTION=$SECTIONS/50-objects.md
    [ "$(cat "$WORK/full.rc" 2>/dev/null)" = 0 ] || die "no successful full build whose objects to reuse"
    local env log=$WORK/objects.log rc=0 t settings=()
    : > "$log"
    rm -rf "$WORK/env-objects" "$WORK/fa-shim-cache/wheels"  # the wheel cache emptied, objects kept
    env=$(make_env objects)
    read -r -a settings < "$WORK/full.settings" || true
    t=$(date +%s)
    pip_build "$env" "$log" $(($(left) - 20)) "${settings[@]}" || rc=$?
    local took=$(($(date +%s) - t)) served
    served=$(grep -o 'kernel objects from the object cache.*' "$log" | tail -1 || true)
    {
        echo "## Object cache: the full build again, wheel cache emptied, object cache kept"
        echo
        echo "| step | result | seconds |"
        echo "|---|---|---|"
        if [ "$rc" -eq 0 ] && [ -n "$served" ]; then
            echo "| pip install (same settings) | ok: $(grep -o '[0-9]* kernel objects from' "$log" | tail -1) the object cache; $(grep -o 'upstream build: .*' "$log" | tail -1) | $took |"
        else
            echo "| pip install (same settings) | FAILED: exit status $rc, ${served:-no object-cache line in the log} | $took |"
            rc=1
        fi
    } > "$SECTION"
    t=$(date +%s)
    if fa_shim "$env" verify flash_attn >> "$log" 2>&1; then
        md "| fa-shim verify (reused objects) | ok: $(grep '^result:' "$log" | tail -1) | $(($(date +%s) - t)) |"
    else
        md "| fa-shim verify (reused objects) | FAILED (objects.log) | $(($(date +%s) - t)) |"; rc=1
    fi
    upstream_tests "$env" full objects 30 || rc=1
    echo "objects" > "$WORK/objects.done"
    publish
    return "$rc"
}

phase_auto() {
    begin auto
    local rc=0
    if tailored_pending && [ "$(left)" -ge 150 ]; then
        SECTION=$SECTIONS/10-tailored.md
        tailored_tests "$WORK/env-tailored" || rc=1
    fi
    if full_running; then
        phase_wait_full
    fi
    if tailored_pending && [ "$(left)" -ge 150 ]; then
        SECTION=$SECTIONS/10-tailored.md
        tailored_tests "$WORK/env-tailored" || rc=1
    fi
    if [ -f "$WORK/full.rc" ] && [ ! -f "$WORK/full-tests.done" ] && [ "$(left)" -ge 330 ]; then
        phase_full_tests || rc=1
        echo "done" > "$WORK/full-tests.done"
    fi
    if [ -f "$WORK/full-tests.done" ] && [ ! -f "$WORK/cache-hit.done" ] && [ "$(left)" -ge 90 ]; then
        phase_cache_hit || rc=1
    fi
    if [ -f "$WORK/cache-hit.done" ] && { [ -f "$WORK/tailored.done" ] || [ ! -f "$WORK/tailored.start" ]; }; then
        say "ALL PHASES DONE"
    elif [ -f "$WORK/full.start" ] && [ ! -f "$WORK/full.rc" ] && ! full_running; then
        say "the full build process is gone without an exit status (stopped, or a fresh machine):"
        say "run start-full again"
        rc=1
    else
        say "not done yet: call auto again (full build: $(full_running && echo running || echo "exit status $(cat "$WORK/full.rc" 2>/dev/null || echo none)"))"
    fi
    publish
    return "$rc"
}

status=0
for phase in "$@"; do
    case $phase in
        machine) phase_machine || status=1 ;;
        tailored) phase_tailored || status=1 ;;
        start-full) phase_start_full || status=1 ;;
        status) phase_status || status=1 ;;
        stop-full) phase_stop_full || status=1 ;;
        wait-full) phase_wait_full || status=1 ;;
        full-tests)
            phase_full_tests || status=1
            echo "done" > "$WORK/full-tests.done"
            ;;
        cache-hit) phase_cache_hit || status=1 ;;
        objects) phase_objects || status=1 ;;
        auto) phase_auto || status=1 ;;
    esac
done
say "phases $* done in $(($(date +%s) - T0)) s (exit status $status)"
exit "$status"
