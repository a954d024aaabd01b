#!/usr/bin/env bash
# The stable line's random numbers against the per-torch wheel's, on the GPU box (issue 54,
# docs/guides/stable-abi.md). Both wheels of one kernel set (head dim 32, bf16, sm_90) are built
# there under its torch (2.11, Python 3.12, no network), the stable one taking the per-torch
# build's kernel objects from the object cache; then, for each: verify, bench/fa2_stable_ab.py dump
# (outputs, the Philox seeds and offsets drawn, the generators after refused calls, cuDNN's LSTM
# around a dropout call) and graphs; compare; and upstream's tests/test_flash_attn.py on a seeded
# selection of the set's cases, dropout included (bench/upstream_selection.py --plan set).
#
#   setsid bash bench/fa2_stable_rng_device.sh DIR    # DIR/device.log ...; DIR/done at the end
#
# With OLD=TREE (a fa-shim tree of an earlier commit), a third wheel, that tree's stable one, is
# built and compared too (ab-old.txt): what the comparison finds in a line that is not upstream's.
#
# Reads CARRY (default: .carry-rng/ beside this repo's root): repo/ (the fa-shim tree to build
# from), sdist/ (flash_attn-2.8.3.post2.tar.gz), whl/ (pyelftools), sel/ (upstream_selection.py
# select TEST_FILE --plan set --head-dims 32 --dtypes bf16 --per-function 120 --seed 0).
set -uo pipefail
DEST=${1:?DIR}
CARRY=${CARRY:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.carry-rng}
REPO=/tmp/fa-shim-rng  # a copy: the builds write beside the tree
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
export CXX=/usr/bin/g++ CC=/usr/bin/gcc XDG_CACHE_HOME=/tmp/rng-xdg FA_SHIM_SDIST_DIR=$CARRY/sdist
mkdir -p "$DEST"
T0=$(date +%s)
say() { echo "[$(($(date +%s) - T0))s] $*"; }
py() { local line=$1; shift; PYTHONPATH=/tmp/site-$line python3 "$@"; }  # py LINE ARGS...
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
nproc
rm -rf "$REPO" && cp -r "$CARRY/repo" "$REPO" && cd "$REPO" || exit 1
python3 -m pip install -q --no-deps --no-index --target /tmp/site-build "$CARRY"/whl/*.whl
SET=(-C head-dims=32 -C dtypes=bf16 -C cuda-archs=90)
LINES=(torch stable)
if [ -n "${OLD:-}" ]; then
    rm -rf /tmp/fa-shim-old && cp -r "$OLD" /tmp/fa-shim-old && rm -rf /tmp/fa-shim-old/.carry-rng
    LINES+=(old)
fi
for line in "${LINES[@]}"; do
    abi=(); [ $line = torch ] || abi=(-C torch-abi=stable)
    tree=$REPO; [ $line = old ] && tree=/tmp/fa-shim-old
    say "build $line: pip wheel $tree ${abi[*]} ${SET[*]}"
    (cd "$tree" && PYTHONPATH=/tmp/site-build python3 -m pip wheel -v --no-build-isolation \
        --no-deps --no-index -w /tmp/dist-$line . "${abi[@]}" "${SET[@]}") > "$DEST/build-$line.log" 2>&1
    say "build $line: exit $? $(ls /tmp/dist-$line)"
    grep -E 'fa-shim: .*(object cache|compil|wheel)' "$DEST/build-$line.log" | tail -n 6
    python3 -m pip install -q --no-deps --no-index --target /tmp/site-$line "$CARRY"/whl/*.whl \
        /tmp/dist-$line/*.whl
    py $line -m fa_backend verify flash_attn > "$DEST/verify-$line.txt" 2>&1
    say "verify $line: $(grep -E '^result' "$DEST/verify-$line.txt")"
done

for line in "${LINES[@]}"; do
    (cd /tmp && py $line "$REPO/bench/fa2_stable_ab.py" dump "/tmp/ab-$line.pt") \
        > "$DEST/dump-$line.txt" 2>&1
    (cd /tmp && py $line "$REPO/bench/fa2_stable_ab.py" graphs) > "$DEST/graphs-$line.txt" 2>&1
    say "dump $line: $(tr '\n' ' ' < "$DEST/dump-$line.txt")"
    say "graphs $line: $(tr '\n' ' ' < "$DEST/graphs-$line.txt")"
done
python3 "$REPO/bench/fa2_stable_ab.py" compare /tmp/ab-torch.pt /tmp/ab-stable.pt > "$DEST/ab.txt" 2>&1
say "A/B: exit $? $(tail -n 1 "$DEST/ab.txt")"
if [ -n "${OLD:-}" ]; then
    python3 "$REPO/bench/fa2_stable_ab.py" compare /tmp/ab-torch.pt /tmp/ab-old.pt > "$DEST/ab-old.txt" 2>&1
    say "A/B old: exit $? $(grep -c DIFFERENT "$DEST/ab-old.txt") different: $(tail -n 1 "$DEST/ab-old.txt")"
fi

for line in stable torch; do
    (cd "$CARRY/sel" && timeout -s INT -k 20 240 env PYTHONPATH=/tmp/site-$line python3 -m pytest \
        -p no:cacheprovider -q -rfE --junitxml="/tmp/junit-$line.xml" test_flash_attn.py \
        > "$DEST/upstream-$line.log" 2>&1)
    python3 "$REPO/bench/upstream_selection.py" judge --plan-file "$CARRY/sel/plan.json" \
        --junit "/tmp/junit-$line.xml" > "$DEST/upstream-verdict-$line.txt" 2>&1
    say "upstream tests $line: $(tail -n 1 "$DEST/upstream-$line.log")" \
        "$(tail -n 2 "$DEST/upstream-verdict-$line.txt" | tr '\n' ' ')"
done
say "done"
touch "$DEST/done"
