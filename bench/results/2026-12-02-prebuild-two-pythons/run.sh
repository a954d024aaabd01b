#!/bin/bash
# item 3: prebuild for two Pythons into a wheel cache that holds only the warm-up's objects
set -u
R=/work/wt/bench56/bench/results/2026-12-02-prebuild-two-pythons
mkdir -p $R /tmp/h-bench56/team2
rm -rf /tmp/h-bench56/team2/objects && cp -a /tmp/h-bench56/team/objects /tmp/h-bench56/team2/objects
ls /tmp/h-bench56/team2/objects > $R/objects-copied.txt
echo "start $(date -u +%H:%M:%S) $(uptime)" > $R/uptime.txt
cd /work/wt/bench56
/usr/bin/time -v python3 -m fa_backend prebuild \
  --python /tmp/h-bench56/venv-torch215/bin/python \
  --python /tmp/h-bench56/venv-torch215-py312/bin/python \
  -C wheel-cache-dir=/tmp/h-bench56/team2 -C head-dims=128 -C dtypes=bf16 -C forward-only=true \
  -C cuda-archs=80 -C sdist-dir=/work/shared/sdists -C cache-dir=/tmp/h-bench56/pb-cache \
  -C compiler-cache=none 2>&1 | python3 bench/stamp.py > $R/prebuild.log
echo "end $(date -u +%H:%M:%S) $(uptime)" >> $R/uptime.txt
