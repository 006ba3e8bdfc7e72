#!/usr/bin/env bash
# What the mount costs for a source tree and a large directory, on
# `pollfs mount` and on tmpfs (/dev/shm), in one run; the pollfs image is
# a file on /dev/shm too, so both sides run from memory:
# - `tar x` of libc's .crate (decompressed first, so gzip's CPU is not
#   in it) into a fresh directory, median of REPS, mount and tmpfs
#   alternating;
# - a directory of ENTRIES empty files: made by a python loop, then
#   listed with `ls -f | wc -l` and with a python os.scandir loop, median
#   of REPS, as entries per second.
# Usage: tests/mount/bench_tree.sh [POLLFS_BINARY]   (`just mount-bench-tree`)
set -euo pipefail
POLLFS=${1:-target/release/pollfs}
source "$(dirname "$0")/lib.sh"
REPS=${REPS:-5}
ENTRIES=${ENTRIES:-100000}
THREADS=${THREADS:-4}

bench_mount

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
now() { date +%s%N; }
# ratio LABEL UNIT FILE_MOUNT FILE_TMPFS: a table row of medians.
row() {
    awk -v l="$1" -v m="$(median <"$2")" -v t="$(median <"$3")" \
        'BEGIN { printf "| %s | %.0f | %.0f | %.3f |\n", l, m, t, m / t }'
}

crate=$(crate_tarball libc)
[ -n "$crate" ] || { echo "no libc .crate in cargo's cache: build the workspace first" >&2; exit 1; }
gzip -dc "$crate" >"$SHM/crate.tar"
files=$(tar tf "$SHM/crate.tar" | wc -l)
echo "pollfs mount --threads $THREADS --cache 1g file:/dev/shm/... ; $(basename "$crate") ($files entries, $(($(stat -c %s "$SHM/crate.tar") >> 10)) KiB); median of $REPS; $(nproc) CPUs"
echo

tar_us() { # DIR N -> microseconds
    mkdir "$1/tar$2"
    local t0 t1
    t0=$(now)
    tar xf "$SHM/crate.tar" -C "$1/tar$2"
    t1=$(now)
    echo $(((t1 - t0) / 1000))
}
: >"$WORK/m" && : >"$WORK/t"
for i in $(seq "$REPS"); do tar_us "$MNT" "$i" >>"$WORK/m"; tar_us "$TMPFS" "$i" >>"$WORK/t"; done
echo "| tar xf (uncompressed .crate) | pollfs mount | tmpfs | mount / tmpfs |"
echo "| --- | ---: | ---: | ---: |"
row "microseconds" "$WORK/m" "$WORK/t"

make_entries() { # DIR -> files made per second
    python3 - "$1" "$ENTRIES" <<'PY'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
os.mkdir(d)
t = time.perf_counter()
for i in range(n):
    os.close(os.open(f"{d}/entry-{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
print(f"{n / (time.perf_counter() - t):.0f}")
PY
}
ls_rate() { # DIR -> entries per second
    local t0 t1 n
    t0=$(now)
    n=$(ls -f "$1" | wc -l)
    t1=$(now)
    [ "$n" = $((ENTRIES + 2)) ] || { echo "ls -f listed $n entries" >&2; exit 1; }
    awk -v n="$n" -v ns=$((t1 - t0)) 'BEGIN { printf "%.0f\n", n / ns * 1e9 }'
}
scandir_rate() { # DIR -> entries per second
    python3 - "$1" "$ENTRIES" <<'PY'
import os, sys, time
d, want = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
n = sum(1 for _ in os.scandir(d))
took = time.perf_counter() - t
assert n == want, f"os.scandir listed {n}"
print(f"{n / took:.0f}")
PY
}
make_entries "$MNT/big" >"$WORK/mc"
make_entries "$TMPFS/big" >"$WORK/tc"
: >"$WORK/ml" && : >"$WORK/tl" && : >"$WORK/ms" && : >"$WORK/ts"
for _ in $(seq "$REPS"); do
    ls_rate "$MNT/big" >>"$WORK/ml"
    ls_rate "$TMPFS/big" >>"$WORK/tl"
    scandir_rate "$MNT/big" >>"$WORK/ms"
    scandir_rate "$TMPFS/big" >>"$WORK/ts"
done
echo
echo "| a directory of $ENTRIES files | pollfs mount | tmpfs | mount / tmpfs |"
echo "| --- | ---: | ---: | ---: |"
row "made per second (python os.open loop, once)" "$WORK/mc" "$WORK/tc"
row "listed per second, ls -f \\| wc -l" "$WORK/ml" "$WORK/tl"
row "listed per second, python os.scandir" "$WORK/ms" "$WORK/ts"

kill -TERM "$PID"
wait "$PID"
unset "SERVER[bench]"
