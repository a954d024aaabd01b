#!/bin/bash
# One real tailored FA2 build beside LOADERS busy loops, every stderr line timestamped
# (bench/stamp.py) and the load average every 30 s (issue 56 item 5: the ETA's lines on a loaded
# box are recorded, never asserted by time), then bench/eta_table.py's table of them. Usage:
#   LOADERS=3 bench/eta_loaded.sh PYTHON OUT_DIR [-C key=value ...]
set -u
python=$1 out=$2
shift 2
bench=$(cd "$(dirname "$0")" && pwd)
wheels=$(mktemp -d)  # the wheel itself stays out of the record
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$wheels"' EXIT
for _ in $(seq "${LOADERS:-3}"); do python3 -c 'while True: pass' & pids+=($!); done
(while true; do echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 30; done) \
  >"$out/loadavg.txt" & pids+=($!)
echo "start $(date -u +%H:%M:%S) $(uptime)" >"$out/uptime.txt"
(cd "$bench/.." && PIP_NO_CACHE_DIR=1 /usr/bin/time -v "$python" -m pip wheel -v \
  --no-build-isolation --no-deps --no-index -w "$wheels" . "$@") 2>&1 |
  python3 "$bench/stamp.py" >"$out/build.log"
echo "end $(date -u +%H:%M:%S) $(uptime)" >>"$out/uptime.txt"
python3 "$bench/eta_table.py" "$out/build.log" >"$out/eta-table.md"
