"""Copy stdin to stdout, each line prefixed with the UTC time and the seconds since this started
(`ts` is not installed on the CI box): `cmd 2>&1 | python3 bench/stamp.py > log`."""

import sys
import time

start = time.monotonic()
for line in sys.stdin:
    now = time.strftime("%H:%M:%S", time.gmtime())
    sys.stdout.write(f"{now} {time.monotonic() - start:8.1f} {line}")
    sys.stdout.flush()
