#!/usr/bin/env bash
# Fill .carry/ for bench/fa3_stable_device.sh (the device has no network): the four FA3 tarballs
# of ../shared/fa3 and the pure-Python wheels the device script installs (about 6 MB in all).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .carry/fa3 .carry/whl
cp ../shared/fa3/*.tar.gz ../shared/fa3/SHA256SUMS .carry/fa3/
(cd .carry/fa3 && sha256sum -c SHA256SUMS)
python3 -m pip download -q --no-deps --only-binary=:all: -d .carry/whl \
  pyelftools einops pytest pluggy iniconfig pygments  # pytest >= 8.4 needs pygments
ls -l .carry/fa3 .carry/whl
