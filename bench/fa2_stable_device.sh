#!/usr/bin/env bash
# FlashAttention-2's stable-ABI wheel (-C torch-abi=stable) on the GPU box (torch 2.11, Python
# 3.12, no network), beside the per-torch wheel of the same kernel set (docs/guides/stable-abi.md).
# Both wheels are built on the CPU box and carried in .carry-fa2/ (bench/fa2_stable_carry.sh):
# the stable one under torch 2.14.1 (cp310-abi3), the per-torch one under torch 2.11 (cp312).
#
#   bash bench/fa2_stable_device.sh OUT_DIR
#
# In two site directories over the image's torch (PYTHONPATH: the image's python is itself a
# venv, whose packages a --system-site-packages venv would not see): verify; upstream's
# tests/test_flash_attn.py on a seeded selection of the set's cases (bench/upstream_selection.py
# --plan set, dropout included) for the stable wheel; bench/fa2_stable_ab.py dump in both and compare (bit for bit, the generator's
# offsets included) and its graphs check; transformers' flash_attention_2 (bench/
# fa3_transformers.py 2); bench/speed.py forward and backward, the two wheels alternating.
set -uo pipefail
DEST=${1:?OUT_DIR}
OUT=/tmp/fa2-stable  # packed into DEST/fa2-stable.tar.gz at the end (DEST takes 8 files)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CARRY=$REPO/.carry-fa2
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
mkdir -p "$OUT"
T0=$(date +%s)
say() { echo "[$(($(date +%s) - T0))s] $*"; }
py() { local line=$1; shift; PYTHONPATH=/tmp/site-$line python3 "$@"; }  # py LINE ARGS...
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"

for line in stable torch; do
    python3 -m pip install -q --no-deps --no-index --target /tmp/site-$line "$CARRY"/whl/*.whl \
        "$CARRY"/$line/*.whl
    say "$line: $(cd /tmp && py $line -c 'import flash_attn; print(flash_attn.__version__, flash_attn.__file__)')"
    (cd "$REPO" && py $line -m fa_backend verify flash_attn) > "$OUT/verify-$line.txt" 2>&1
    say "verify $line: $(grep -E '^result' "$OUT/verify-$line.txt")"
done

say "upstream tests (stable wheel)"
(cd "$CARRY/sel" && timeout -s INT -k 20 300 env PYTHONPATH=/tmp/site-stable python3 -m pytest \
    -p no:cacheprovider -q -rfE --junitxml="$OUT/junit-stable.xml" test_flash_attn.py > "$OUT/upstream-tests.log" 2>&1)
tail -n 3 "$OUT/upstream-tests.log"
python3 "$REPO/bench/upstream_selection.py" judge --plan-file "$CARRY/sel/plan.json" \
    --junit "$OUT/junit-stable.xml" > "$OUT/upstream-verdict.txt" 2>&1
say "verdict: $(tail -n 2 "$OUT/upstream-verdict.txt" | tr '\n' ' ')"

for line in stable torch; do
    (cd /tmp && py $line "$REPO/bench/fa2_stable_ab.py" dump "/tmp/ab-$line.pt")
    (cd /tmp && py $line "$REPO/bench/fa2_stable_ab.py" graphs) > "$OUT/graphs-$line.txt" 2>&1
    say "graphs $line: $(tr '\n' ' ' < "$OUT/graphs-$line.txt")"
done
python3 "$REPO/bench/fa2_stable_ab.py" compare /tmp/ab-torch.pt /tmp/ab-stable.pt > "$OUT/ab.txt" 2>&1
say "A/B: $(tail -n 1 "$OUT/ab.txt")"

(cd /tmp && py stable "$REPO/bench/fa3_transformers.py" 2 --head-dim 32) \
    > "$OUT/transformers-stable.json" 2> "$OUT/transformers-stable.err"
say "transformers: exit $? $(grep -E 'kernel_in|argmax|greedy_tokens_equal' "$OUT/transformers-stable.json" | tr -s ' \n' ' ')"

for round in 1 2; do
    for line in stable torch; do
        (cd /tmp && py $line "$REPO/bench/speed.py" --head-dim 32 --no-sdpa \
            --seqlens 1024,4096,16384 --label "$line" --out "$OUT/speed-$line-$round.json" \
            --markdown "$OUT/speed-$line-$round.md") > /dev/null 2>> "$OUT/speed.err"
        say "speed $line round $round: $(tail -n +3 "$OUT/speed-$line-$round.md" | tr -s ' \n' ' ' | cut -c1-300)"
    done
done
say "done"
tar czf "$DEST/fa2-stable.tar.gz" -C "$(dirname "$OUT")" "$(basename "$OUT")"
