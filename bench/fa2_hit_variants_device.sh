#!/usr/bin/env bash
# Two measurements on the GPU box, from one small tailored FA2 set built there under its torch
# (head dim 32, bf16, forward only, sm_90) into a team cache with wheel variants on:
#  - issue 55: uv 0.13.9 with `--preview-features wheel-variants` and no override variables, from
#    the per-torch index (which lists full sets only) and from the kernel set's directory: which
#    wheel it takes on the real GPU, and one flash_attn_func call from it; pip from the same two
#    (variants/);
#  - issue 53 item 6: a wheel-cache hit (`pip install --no-build-isolation --no-deps CHECKOUT -C
#    <the same settings>`) against pip's own install of the cached wheel (`pip install --no-deps
#    WHEEL`), flash-attn uninstalled before each run, RUNS runs each, alternating; then where
#    fa-shim's time goes: a timestamped `pip -v` of one hit, and each hook that pip calls run in
#    its own process as pip runs it, under cProfile and under -X importtime (hit/).
#
#   setsid bash bench/fa2_hit_variants_device.sh DIR    # DIR/summary.txt ...; DIR/done at the end
#
# Builds HERE (default: this repo's root). Reads CARRY (default: .carry-dev/ in HERE): sdist/ (flash_attn-2.8.3.post2.tar.gz),
# whl/ (pip, pyelftools, uv 0.13.9). The venvs see the device's torch through a .pth file (a venv
# of the image's venv interpreter with --system-site-packages would see the base one's only).
set -uo pipefail
DEST=${1:?DIR}
HERE=${HERE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}  # the checkout to build
CARRY=${CARRY:-$HERE/.carry-dev}
RUNS=${RUNS:-9}
REPO=/tmp/fa-shim-dev  # a copy: the build writes beside the tree
TEAM=/tmp/team
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
export CXX=/usr/bin/g++ CC=/usr/bin/gcc XDG_CACHE_HOME=/tmp/dev-xdg FA_SHIM_SDIST_DIR=$CARRY/sdist
unset $(env | grep -oE '^(NV_VARIANT|UV_)[A-Z_]*') 2>/dev/null
mkdir -p "$DEST/variants" "$DEST/hit"
S=$DEST/summary.txt
T0=$(date +%s)
say() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$S"; }
now() { date +%s.%N; }
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0], sys.executable)"
    echo "cores $(nproc)"; uname -r; env | grep -E '^PYTHON' || echo 'no PYTHON* variables'
    (cd "$HERE" && find fa_backend -name '*.py' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16) | sed 's/^/fa_backend tree sha256: /'
} 2>&1 | tee -a "$S"
SITE=$(python3 -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
TV=$(python3 -c "import torch; print(torch.__version__)")
PIPWHL=$(ls "$CARRY"/whl/pip-*.whl)
mkvenv() {  # mkvenv DIR: a fresh venv with the carried pip, seeing the device's torch
    python3 -m venv --without-pip "$1" && echo "$SITE" > "$1/lib/python3.12/site-packages/device-torch.pth"
    "$1/bin/python" "$PIPWHL/pip" install -q --no-index "$PIPWHL"
}
python3 -m pip install -q --no-deps --no-index --target /tmp/uv-site "$CARRY"/whl/uv-*.whl
UV=/tmp/uv-site/bin/uv
say "$("$UV" --version); $(python3 -m pip --version | cut -d' ' -f1-2) (image)"
rm -rf "$REPO" && mkdir -p "$REPO" && (cd "$HERE" && tar --exclude=./.git --exclude=./.carry-dev -cf - .) | tar xf - -C "$REPO"
VT=/tmp/vt && mkvenv $VT && $VT/bin/python -m pip install -q --no-index --no-deps "$CARRY"/whl/pyelftools-*.whl
say "venv $VT: $($VT/bin/python -m pip --version | cut -d' ' -f1-2), torch $($VT/bin/python -c 'import torch; print(torch.__version__)')"
SET=(-C head-dims=32 -C dtypes=bf16 -C forward-only=true -C cuda-archs=90 -C wheel-variants=true -C "wheel-cache-dir=$TEAM")

# the team's build, into the cache (and the venv)
t=$(now)
(cd "$REPO" && $VT/bin/python -m pip install -v --no-build-isolation --no-deps . "${SET[@]}") > "$DEST/build.log" 2>&1
say "build: exit $? in $(python3 -c "print(f'{$(now) - $t:.1f}')") s: pip install -v --no-build-isolation --no-deps . ${SET[*]}"
grep -E 'fa-shim: .*(unit|compil|wheel cache|variant|verify)' "$DEST/build.log" | tail -n 8 | tee -a "$S"
(cd "$TEAM" && find . -name '*.whl' -o -name '*-variants.json' -o -name entry.json -o -name index.html | sort) | tee -a "$S"
INDEX=$TEAM/index/torch-$TV/hdim32.bf16.fwd  # the kernel set's own index (every view has one)
WHEEL=$(python3 -c "import json, glob, os; e=[p for p in glob.glob('$TEAM/*/entry.json')]; print(os.path.join(os.path.dirname(e[0]), json.load(open(e[0]))['wheel']))" 2>/dev/null)
[ -f "$WHEEL" ] || WHEEL=$(ls "$TEAM"/*/flash_attn-*.whl | head -n 1)
say "the cached wheel: $WHEEL"
(cd "$REPO" && $VT/bin/python -m fa_backend cache check "$TEAM") > "$DEST/variants/cache-check.txt" 2>&1
say "cache check: exit $? $(grep -E 'variants.json|matches' "$DEST/variants/cache-check.txt" | tr -s ' ' | tr '\n' ' ')"

# issue 55: uv on the real GPU, no override variables, from the per-torch index
WHICH='import importlib.metadata as m, json
d = m.distribution("flash-attn"); t = d.read_text("variant.json")
print("installed", d.version, "variant.json:", json.dumps(json.loads(t)["variants"]) if t else "none (the plain wheel)")'
CALL='import torch, flash_attn
from flash_attn import flash_attn_func
from torch.nn.functional import scaled_dot_product_attention as sdpa
torch.manual_seed(0)
q, k, v = (torch.randn(2, 512, 8, 32, device="cuda", dtype=torch.bfloat16) for _ in range(3))
o = flash_attn_func(q, k, v, causal=True); torch.cuda.synchronize()
r = sdpa(*(x.transpose(1, 2) for x in (q, k, v)), is_causal=True).transpose(1, 2)
print("flash_attn", flash_attn.__version__, "from", flash_attn.__file__)
print("flash_attn_func on", torch.cuda.get_device_name(), "out", tuple(o.shape), o.dtype, "max abs diff vs SDPA", (o - r).abs().max().item())'
env | grep -E '^(NV_|UV_)' > "$DEST/variants/env-nv-uv.txt"; say "NV_*/UV_* variables set: $(wc -l < "$DEST/variants/env-nv-uv.txt")"
KS=$(dirname "$(ls "$TEAM/torch-$TV"/*/flash_attn-*-sm90.whl | head -n 1)")  # the kernel set's directory
cp "$INDEX/index.html" "$DEST/variants/set-index.html" 2>/dev/null; cp "$INDEX/flash-attn/index.html" "$DEST/variants/set-index-flash-attn.html" 2>/dev/null
say "the kernel set's index $INDEX lists: $(grep -c '<a ' "$INDEX/index.html") distribution(s); the set's directory $KS"
for src in index find-links; do
    where=(--index-url "file://$INDEX"); [ $src = find-links ] && where=(--no-index --find-links "$KS")
    for deps in with-deps no-deps; do
        VU=/tmp/vu-$src-$deps && python3 -m venv --without-pip $VU && echo "$SITE" > $VU/lib/python3.12/site-packages/device-torch.pth
        flag=(); [ $deps = no-deps ] && flag=(--no-deps)
        cmd=("$UV" pip install -v --python $VU/bin/python --preview-features wheel-variants "${where[@]}" "${flag[@]}" flash-attn)
        UV_CACHE_DIR=/tmp/uvc-$src-$deps "${cmd[@]}" > "$DEST/variants/uv-$src-$deps.log" 2>&1
        rc=$?
        say "uv ($src, $deps): exit $rc: ${cmd[*]}"
        grep -E 'Selecting: flash-attn|^ \+ |error|cause' "$DEST/variants/uv-$src-$deps.log" | head -n 5 | tee -a "$S"
        [ $rc = 0 ] || continue
        $VU/bin/python -c "$WHICH" 2>&1 | tee -a "$S"
        (cd /tmp && $VU/bin/python -c "$CALL") 2>&1 | tail -n 3 | tee -a "$S"
        break
    done
done
for src in index find-links; do
    where=(--index-url "file://$INDEX"); [ $src = find-links ] && where=(--no-index --find-links "$KS")
    VP=/tmp/vp-$src && mkvenv $VP
    cmd=($VP/bin/python -m pip install -v --no-deps "${where[@]}" flash-attn)
    "${cmd[@]}" > "$DEST/variants/pip-$src.log" 2>&1
    say "pip ($src): exit $?: ${cmd[*]} ($($VP/bin/python -m pip --version | cut -d' ' -f1-2))"
    grep -E 'Processing|Skipping link|Successfully installed|No matching' "$DEST/variants/pip-$src.log" | head -n 6 | tee -a "$S"
    $VP/bin/python -c "$WHICH" 2>&1 | tail -n 1 | tee -a "$S"
done

# issue 53 item 6: the hit against pip's own install of the cached wheel
$VT/bin/python -m pip uninstall -y -q flash-attn
(cd "$REPO" && $VT/bin/python -m pip install --no-build-isolation --no-deps . "${SET[@]}") > "$DEST/hit/warm-up.log" 2>&1
say "warm-up hit: exit $?"
NOVAR=("${SET[@]/wheel-variants=true/wheel-variants=false}")
$VT/bin/python -m pip uninstall -y -q flash-attn
(cd "$REPO" && $VT/bin/python -m pip install -v --no-build-isolation --no-deps . "${NOVAR[@]}") > "$DEST/hit/warm-up-novariants.log" 2>&1
say "warm-up hit with ${NOVAR[*]}: exit $? $(grep -c 'wheel cache hit' "$DEST/hit/warm-up-novariants.log") hit line(s)"
# the same pair where Python writes bytecode (a user's default; this image sets
# PYTHONDONTWRITEBYTECODE=1, so every fa_backend module is compiled anew in each hook process)
$VT/bin/python -m pip uninstall -y -q flash-attn
(cd "$REPO" && env -u PYTHONDONTWRITEBYTECODE $VT/bin/python -m pip install --no-build-isolation --no-deps . "${SET[@]}") > "$DEST/hit/warm-up-bytecode.log" 2>&1
say "warm-up hit writing bytecode: exit $?"
echo -e "run\tcase\tseconds\texit" > "$DEST/hit/times.tsv"
for i in $(seq 1 "$RUNS"); do
    for c in hit wheel hit-novariants hit-bytecode wheel-bytecode; do
        $VT/bin/python -m pip uninstall -y -q flash-attn > /dev/null 2>&1
        t=$(now)
        if [ $c = hit-bytecode ]; then
            (cd "$REPO" && env -u PYTHONDONTWRITEBYTECODE $VT/bin/python -m pip install -q --no-build-isolation --no-deps . "${SET[@]}") > "$DEST/hit/run-$c.log" 2>&1
        elif [ $c = wheel-bytecode ]; then
            env -u PYTHONDONTWRITEBYTECODE $VT/bin/python -m pip install -q --no-deps "$WHEEL" > "$DEST/hit/run-$c.log" 2>&1
        elif [ $c = hit ]; then
            (cd "$REPO" && $VT/bin/python -m pip install -q --no-build-isolation --no-deps . "${SET[@]}") > "$DEST/hit/run-$c.log" 2>&1
        elif [ $c = hit-novariants ]; then
            (cd "$REPO" && $VT/bin/python -m pip install -q --no-build-isolation --no-deps . "${NOVAR[@]}") > "$DEST/hit/run-$c.log" 2>&1
        else
            $VT/bin/python -m pip install -q --no-deps "$WHEEL" > "$DEST/hit/run-$c.log" 2>&1
        fi
        rc=$?
        echo -e "$i\t$c\t$(python3 -c "print(f'{$(now) - $t:.3f}')")\t$rc" >> "$DEST/hit/times.tsv"
    done
done
python3 - "$DEST/hit/times.tsv" <<'E' | tee -a "$S"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = {}
for c in ("hit", "wheel", "hit-novariants", "hit-bytecode", "wheel-bytecode"):
    xs = [float(r["seconds"]) for r in rows if r["case"] == c]
    bad = [r["run"] for r in rows if r["case"] == c and r["exit"] != "0"]
    med[c] = statistics.median(xs)
    print(f"{c}: median {med[c]:.3f} s of {len(xs)} (min {min(xs):.3f}, max {max(xs):.3f}); failed runs: {bad or 'none'}")
    print("   ", " ".join(f"{x:.3f}" for x in xs))
print(f"fa-shim's share (hit - wheel, medians): {med['hit'] - med['wheel']:.3f} s; with -C wheel-variants=false: {med['hit-novariants'] - med['wheel']:.3f} s; writing bytecode: {med['hit-bytecode'] - med['wheel-bytecode']:.3f} s")
E

# where the hit's time goes: pip -v timestamped, then each hook in its own process
STAMP='import sys, time
t = time.time()
for line in sys.stdin: print(f"{time.time() - t:7.3f} {line}", end="")'
$VT/bin/python -m pip uninstall -y -q flash-attn
(cd "$REPO" && $VT/bin/python -m pip install -v --no-build-isolation --no-deps . "${SET[@]}" 2>&1) | python3 -c "$STAMP" > "$DEST/hit/pip-v-stamped.log"
say "pip -v of a hit: $(tail -n 1 "$DEST/hit/pip-v-stamped.log")"
CS="{'head-dims': '32', 'dtypes': 'bf16', 'forward-only': 'true', 'cuda-archs': '90', 'wheel-variants': 'true', 'wheel-cache-dir': '$TEAM'}"
cat > /tmp/hook.py <<E
import sys, time, tempfile
t0 = time.perf_counter()
sys.path.insert(0, "$REPO")
import fa_backend
t1 = time.perf_counter()
hook, cs = sys.argv[1], $CS
if hook == "prepare_metadata_for_build_wheel":
    r = fa_backend.prepare_metadata_for_build_wheel(tempfile.mkdtemp(), cs)
else:
    md = tempfile.mkdtemp(); name = fa_backend.prepare_metadata_for_build_wheel(md, cs)
    t1 = time.perf_counter()  # (the metadata pip hands on is made first, outside the figure)
    r = fa_backend.build_wheel(tempfile.mkdtemp(), cs, md + "/" + name)
print(f"{hook}: import fa_backend {t1 - t0:.3f} s, hook {time.perf_counter() - t1:.3f} s -> {r}", file=sys.stderr)
E
cd "$REPO" || exit 1
for hook in prepare_metadata_for_build_wheel build_wheel; do
    t=$(now); $VT/bin/python /tmp/hook.py $hook 2> "$DEST/hit/$hook-plain.txt"
    say "$hook, own process: $(python3 -c "print(f'{$(now) - $t:.3f}')") s wall; $(tail -n 1 "$DEST/hit/$hook-plain.txt")"
    $VT/bin/python -X importtime /tmp/hook.py $hook 2> "$DEST/hit/$hook-importtime.txt"
    $VT/bin/python -m cProfile -o "/tmp/$hook.prof" /tmp/hook.py $hook 2> /dev/null
    python3 -c "
import pstats, sys
pstats.Stats('/tmp/$hook.prof', stream=sys.stdout).sort_stats('cumulative').print_stats(45)" > "$DEST/hit/$hook-cprofile.txt"
    python3 - "$DEST/hit/$hook-importtime.txt" <<'E' | tee -a "$S"
import sys
rows = []
for line in open(sys.argv[1]):
    if line.startswith("import time:") and "|" in line:
        self_us, cum, name = line[12:].split("|")
        if cum.strip().isdigit():
            rows.append((int(cum), name.rstrip()))
top = [r for r in rows if not r[1].startswith("   ")]  # imported at the top level
print("  top-level imports by cumulative time:", ", ".join(f"{n.strip()} {c/1e6:.3f} s" for c, n in sorted(top, reverse=True)[:8]))
E
done
$VT/bin/python -m pip install -q --no-deps "$WHEEL" >/dev/null 2>&1
say "done"
touch "$DEST/done"
