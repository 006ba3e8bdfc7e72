#!/usr/bin/env bash
# What one FUSE round trip costs, reading /dev/fuse and over io_uring: a
# mount in direct cache mode (every read is a request), 100,000 1-byte
# preads of one file from one thread; per pread, the wall time, the
# caller's CPU time (os.times) and the server's (all its threads,
# utime + stime from /proc/PID/stat). REPS runs of each, alternating.
# Needs root, /dev/fuse, python3; the io_uring runs need the `fuse`
# module's enable_uring (turned on here) and are left out without it.
# Usage: tests/mount/roundtrip.sh [POLLFS_BINARY]   (`just mount-roundtrip`)
set -euo pipefail
POLLFS=${1:-target/release/pollfs}
source "$(dirname "$0")/lib.sh"
REPS=${REPS:-3}
URINGS=off
if echo Y 2>/dev/null >/sys/module/fuse/parameters/enable_uring; then URINGS="off on"; fi
CACHE_MODE=direct
TCK=$(getconf CLK_TCK)
server_cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

echo "pollfs mount --cache-mode direct --uring off|on; 100,000 1-byte preads; $(nproc) CPUs; $(uname -r)"
for rep in $(seq "$REPS"); do
    for URING in $URINGS; do
        fresh rt 256m
        start rt
        head -c 4096 /dev/zero >"$(mnt rt)/f"
        s0=$(server_cpu "${SERVER[rt]}")
        read -r wall caller < <(python3 - "$(mnt rt)/f" <<'PY'
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
n = 100000
c0 = os.times()
t = time.perf_counter()
for _ in range(n):
    os.pread(fd, 1, 0)
w = time.perf_counter() - t
c1 = os.times()
print(f"{w / n * 1e6:.2f} {(c1.user - c0.user + c1.system - c0.system) / n * 1e6:.2f}")
PY
        )
        s1=$(server_cpu "${SERVER[rt]}")
        server=$(awk -v a="$s0" -v b="$s1" -v t="$TCK" 'BEGIN { printf "%.2f", (b - a) / t / 100000 * 1e6 }')
        echo "uring $URING: ${wall} us a pread; CPU ${caller} us in the caller, ${server} us in the server;" \
            "load $(cut -d' ' -f1 /proc/loadavg)"
        stop rt
        rm -f "$(img rt)"
    done
done
