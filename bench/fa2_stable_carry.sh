#!/usr/bin/env bash
# Fill .carry-fa2/ for bench/fa2_stable_device.sh (the GPU box has no network): the two wheels
# (stable/: -C torch-abi=stable under torch 2.14.1; torch/: the per-torch wheel under torch 2.11,
# Python 3.12), pyelftools for verify, and the selection of upstream's tests for the set.
#
#   bash bench/fa2_stable_carry.sh STABLE.whl TORCH.whl [HEAD_DIM] [DTYPE]
set -euo pipefail
cd "$(dirname "$0")/.."
STABLE=${1:?stable wheel} TORCH=${2:?per-torch wheel} HDIM=${3:-32} DTYPE=${4:-bf16}
grep -qx '/.carry-fa2/' .git/info/exclude || echo /.carry-fa2/ >> .git/info/exclude
rm -rf .carry-fa2 && mkdir -p .carry-fa2/stable .carry-fa2/torch .carry-fa2/whl
cp "$STABLE" .carry-fa2/stable/ && cp "$TORCH" .carry-fa2/torch/
python3 -m pip download -q --no-deps --only-binary=:all: -d .carry-fa2/whl pyelftools
sdist=$(ls ../shared/sdists/flash_attn-2.8.3.post2.tar.gz)
tmp=$(mktemp -d) && tar xzf "$sdist" -C "$tmp" --wildcards '*/tests/test_flash_attn.py'
python3 bench/upstream_selection.py select "$tmp"/*/tests/test_flash_attn.py --plan set \
    --head-dims "$HDIM" --dtypes "$DTYPE" --per-function 120 --seed 0 --out .carry-fa2/sel
rm -rf "$tmp"
du -sh .carry-fa2
