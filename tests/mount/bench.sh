#!/usr/bin/env bash
# What the mount costs: fio 4 KiB random reads and writes (psync, queue
# depth 1) with 1 and 2 jobs, and sqlite3 inserts in transactions, on
# `pollfs mount` and on tmpfs (/dev/shm), in one run. The pollfs image is
# a file on /dev/shm too, so both sides run from memory and the
# difference is FUSE and pollfs. Each figure is the median of REPS runs,
# mount and tmpfs alternating; for the mount runs it also counts the
# server's CPU time and context switches per request, times a 1-byte
# pread (the round trip with almost no work in it), and runs 1-job reads
# with the server on fio's CPU and on the other one.
# Usage: tests/mount/bench.sh [POLLFS_BINARY]   (`just mount-bench`)
set -euo pipefail
POLLFS=${1:-target/release/pollfs}
source "$(dirname "$0")/lib.sh"
RUNTIME=${RUNTIME:-5}
REPS=${REPS:-3}
SIZE=${SIZE:-128m}
THREADS=${THREADS:-4}
TICK=$(getconf CLK_TCK)

bench_mount
echo "pollfs mount --threads $THREADS --cache 1g file:/dev/shm/... ; fio --ioengine=psync --bs=4k --size=$SIZE --time_based --runtime=$RUNTIME; median of $REPS; $(nproc) CPUs"
echo

# The server's CPU ticks and context switches so far (all threads).
server_cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
server_ctx() {
    cat /proc/"$PID"/task/*/status 2>/dev/null |
        awk '/^(non)?voluntary_ctxt_switches/ {n += $2} END {print n}'
}
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

fio_args() { # DIR RW JOBS
    echo --name=b --directory="$1" --ioengine=psync --rw="$2" --bs=4k --size="$SIZE" \
        --numjobs="$3" --group_reporting
}
# The files are laid out once, before anything is timed.
for d in "$MNT" "$TMPFS"; do
    # shellcheck disable=SC2046
    fio $(fio_args "$d" randread 2) --create_only=1 >/dev/null
done

echo "| fio 4 KiB, psync, QD1 | pollfs mount IOPS (min-max) | tmpfs IOPS | mount / tmpfs | mean latency mount / tmpfs (us) | server CPU per request (us) | server context switches per request | client context switches per request |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for rw in randread randwrite; do
    for jobs in 1 2; do
        kind=${rw#rand}
        : >"$WORK/m" && : >"$WORK/t"
        c=0 x=0
        for _ in $(seq "$REPS"); do
            c0=$(server_cpu) x0=$(server_ctx)
            # shellcheck disable=SC2046
            fio $(fio_args "$MNT" "$rw" "$jobs") --time_based --runtime="$RUNTIME" \
                --output-format=json | jq -r --arg k "$kind" \
                '.jobs[0] | "\(.[$k].iops) \(.[$k].lat_ns.mean / 1000) \(.ctx) \(.[$k].total_ios)"' >>"$WORK/m"
            c=$((c + $(server_cpu) - c0)) x=$((x + $(server_ctx) - x0))
            # shellcheck disable=SC2046
            fio $(fio_args "$TMPFS" "$rw" "$jobs") --time_based --runtime="$RUNTIME" \
                --output-format=json | jq -r --arg k "$kind" \
                '.jobs[0] | "\(.[$k].iops) \(.[$k].lat_ns.mean / 1000)"' >>"$WORK/t"
        done
        mi=$(cut -d' ' -f1 "$WORK/m" | median)
        lo=$(cut -d' ' -f1 "$WORK/m" | sort -g | head -1)
        hi=$(cut -d' ' -f1 "$WORK/m" | sort -g | tail -1)
        ml=$(cut -d' ' -f2 "$WORK/m" | median)
        ti=$(cut -d' ' -f1 "$WORK/t" | median)
        tl=$(cut -d' ' -f2 "$WORK/t" | median)
        ios=$(awk '{n += $4} END {print n}' "$WORK/m")
        cctx=$(awk '{n += $3} END {print n}' "$WORK/m")
        awk -v rw="$rw" -v j="$jobs" -v mi="$mi" -v lo="$lo" -v hi="$hi" -v ti="$ti" \
            -v ml="$ml" -v tl="$tl" -v c="$c" -v x="$x" -v cc="$cctx" -v n="$ios" \
            -v tick="$TICK" 'BEGIN {
            printf "| %s, %d job%s | %.0f (%.0f-%.0f) | %.0f | %.3f | %.1f / %.1f | %.1f | %.2f | %.2f |\n",
                rw, j, (j > 1 ? "s" : ""), mi, lo, hi, ti, mi / ti, ml, tl,
                c / tick * 1e6 / n, x / n, cc / n }'
    done
done

# A request with almost no work in it: a 1-byte pread, 50,000 times.
pread_us() {
    python3 - "$1/b.0.0" <<'PY'
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
n = 50000
t = time.perf_counter()
for _ in range(n):
    os.pread(fd, 1, 0)
print(f"{(time.perf_counter() - t) / n * 1e6:.2f}")
PY
}
: >"$WORK/m" && : >"$WORK/t"
for _ in $(seq "$REPS"); do pread_us "$MNT" >>"$WORK/m"; pread_us "$TMPFS" >>"$WORK/t"; done
echo
echo "| 1-byte pread (python loop) | pollfs mount | tmpfs |"
echo "| --- | ---: | ---: |"
echo "| microseconds per call | $(median <"$WORK/m") | $(median <"$WORK/t") |"

# Where the round trip goes: the same 1-job random reads with fio on CPU
# 0 and the server's threads on CPU 0 (a wake-up stays on one CPU), then
# on CPU 1 (every request and every reply wakes the other CPU).
pinned() {
    taskset -a -p -c "$1" "$PID" >/dev/null
    # shellcheck disable=SC2046
    taskset -c 0 fio $(fio_args "$MNT" randread 1) --time_based --runtime="$RUNTIME" \
        --output-format=json | jq -r '.jobs[0].read | "\(.iops | floor) IOPS, \(.lat_ns.mean / 1000 | floor) us"'
}
if [ "$(nproc)" -ge 2 ]; then
    same=$(pinned 0)
    other=$(pinned 1)
    taskset -a -p -c "0-$(($(nproc) - 1))" "$PID" >/dev/null
    echo
    echo "| randread, 1 job, fio on CPU 0 | server on CPU 0 | server on CPU 1 |"
    echo "| --- | ---: | ---: |"
    echo "| IOPS, mean latency | $same | $other |"
fi
rm -f "$MNT"/b.* "$TMPFS"/b.*

# sqlite3: ROWS rows in TX transactions (rollback journal, synchronous=FULL:
# a journal fsync and a database fsync per transaction).
ROWS=${ROWS:-100000}
TX=${TX:-100}
sqlite_rate() { # DIR -> rows per second
    local db=$1/bench.db per=$((ROWS / TX)) sql t0 t1
    rm -f "$db"
    sqlite3 "$db" "CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT); CREATE INDEX t_k ON t(k);"
    sql=$(for _ in $(seq "$TX"); do
        echo "BEGIN; WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < $per)"
        echo "INSERT INTO t(k, v) SELECT abs(random()) % 100000, hex(randomblob(40)) FROM c; COMMIT;"
    done)
    t0=$(date +%s.%N)
    sqlite3 "$db" <<<"$sql"
    t1=$(date +%s.%N)
    [ "$(sqlite3 "$db" 'SELECT count(*) FROM t')" = "$ROWS" ]
    awk -v n="$ROWS" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f\n", n / (b - a) }'
}
: >"$WORK/m" && : >"$WORK/t"
for _ in $(seq "$REPS"); do sqlite_rate "$MNT" >>"$WORK/m"; sqlite_rate "$TMPFS" >>"$WORK/t"; done
m=$(median <"$WORK/m")
t=$(median <"$WORK/t")
echo
echo "| sqlite3, $ROWS rows in $TX transactions | pollfs mount | tmpfs | mount / tmpfs |"
echo "| --- | ---: | ---: | ---: |"
awk -v m="$m" -v t="$t" 'BEGIN { printf "| inserts per second | %d | %d | %.2f |\n", m, t, m / t }'

kill -TERM "$PID"
wait "$PID"
unset "SERVER[bench]"
