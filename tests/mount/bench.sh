#!/usr/bin/env bash
# What the mount costs against the kernel's filesystems, in one run:
# `pollfs mount` with no options at all (the default configuration, the
# first column: what a user mounts), then in each cache mode (kernel,
# direct), ext4 on a loop device over a file, and tmpfs. Each place in
# PLACES holds both images, pollfs's and ext4's: `disk`, a directory on a
# real disk (DISK, /var/tmp by default: where a flush costs, the case
# users have), and `shm`, /dev/shm (every side runs from memory, so the
# differences are the filesystems and FUSE); tmpfs runs once, the
# memory's limit for both. Rows: fio 4 KiB random reads (fio's default
# cache invalidation, then invalidate=0 with 1, 2 and 4 jobs) and writes,
# 1 MiB sequential reads and writes, 4 KiB writes with an fsync after each
# (psync, queue depth 1), a 1-byte pread, 200 sqlite3 commits (WAL,
# synchronous=FULL), SQLite's speedtest1 with the unix VFS (WAL; the
# system library's default, synchronous=FULL; built by
# capi/scripts/sqlite.sh), `tar x` of libc's .crate then `find` and `git
# status` on the tree, and stress-ng's metadata stressors (dentry, dir,
# rename, utime, chmod; 4 workers, 4,000 operations each). Each figure is
# the median of REPS runs; ratios are pollfs over ext4 (on the same place)
# and over tmpfs, oriented so that above 1.0 means pollfs is faster. Each
# cache mode runs with requests read from /dev/fuse (`--uring off`) and,
# where the kernel has FUSE over io_uring (its enable_uring is turned on
# here), over the ring (`--uring on`); URINGS="off" or "on" runs one of
# them, MODES="" only the default column.
# Needs root, /dev/fuse, losetup, mkfs.ext4, fio, jq, sqlite3 and
# libsqlite3-dev, git, stress-ng, python3.
# Usage: tests/mount/bench.sh [POLLFS_BINARY]   (`just mount-bench`)
# Environment: REPS, RUNTIME (fio seconds), SIZE (fio file), THREADS,
# MODES ("kernel direct"), PLACES ("disk shm"), DISK (/var/tmp), ONLY
# (row keys, e.g. "tx st"), SPEEDTEST.
set -euo pipefail
POLLFS=${1:-target/release/pollfs}
source "$(dirname "$0")/lib.sh"
RUNTIME=${RUNTIME:-3}
REPS=${REPS:-1}
SIZE=${SIZE:-128m}
THREADS=${THREADS:-4}
MODES=${MODES-kernel direct}
PLACES=${PLACES:-disk shm}
DISK=${DISK:-/var/tmp}
if [ -z "${URINGS:-}" ]; then
    URINGS=off
    if echo Y 2>/dev/null >/sys/module/fuse/parameters/enable_uring; then URINGS="off on"; fi
fi
# The pollfs columns: the default configuration (no options), then each
# cache mode with each way of serving requests.
COLS="default"
for mode in $MODES; do for u in $URINGS; do COLS+=" $mode-$u"; done; done
# Row keys to run (e.g. ONLY="tx st"); every row if empty.
ONLY=${ONLY:-}

SHM=$(mktemp -d /dev/shm/pollfs-bench.XXXXXX)
# Each place's directory (images, ext4's mount point) and loop device.
declare -A DIRS LOOPS
finish() {
    cleanup
    local place
    for place in "${!DIRS[@]}"; do
        umount "${DIRS[$place]}/ext4" 2>/dev/null || true
        if [ -n "${LOOPS[$place]:-}" ]; then losetup -d "${LOOPS[$place]}" 2>/dev/null || true; fi
        [ "$place" = shm ] || rm -rf "${DIRS[$place]}"
    done
    umount "$SHM/tmpfs" 2>/dev/null || true
    rm -rf "$SHM"
}
trap finish EXIT
for place in $PLACES; do
    case $place in
    shm) DIRS[$place]=$SHM ;;
    disk) DIRS[$place]=$(mktemp -d "$DISK/pollfs-bench.XXXXXX") ;;
    *) echo "PLACES: disk or shm, not $place" >&2; exit 2 ;;
    esac
done

SPEEDTEST=${SPEEDTEST:-$HERE/../../target/release/speedtest1}
if [ ! -x "$SPEEDTEST" ]; then
    "$HERE/../../capi/scripts/sqlite.sh" >/dev/null
fi

crate=$(crate_tarball libc)
[ -n "$crate" ] || { echo "no libc .crate in cargo's cache: build the workspace first" >&2; exit 1; }
gzip -dc "$crate" >"$SHM/crate.tar"

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
now() { date +%s%N; }
# seconds CMD...: how long CMD takes.
seconds() {
    local t0 t1
    t0=$(now)
    "$@" >/dev/null
    t1=$(now)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", (b - a) / 1e9 }'
}

# fio_rate DIR RW BS JOBS [FIO ARGS]: IOPS (4k) or MiB/s (1m), all jobs.
fio_rate() {
    local dir=$1 rw=$2 bs=$3 jobs=$4 kind
    shift 4
    case $rw in *read) kind=read ;; *) kind=write ;; esac
    fio --name=b --directory="$dir" --ioengine=psync --rw="$rw" --bs="$bs" --size="$SIZE" \
        --numjobs="$jobs" --group_reporting --time_based --runtime="$RUNTIME" "$@" \
        --output-format=json | jq -r --arg k "$kind" --arg bs "$bs" \
        '.jobs[0][$k] | if $bs == "4k" then .iops else .bw / 1024 end'
}

# A request with almost no work in it: a 1-byte pread, 50,000 times (us).
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

sqlite_commits() { # DIR: 200 commits, WAL, synchronous=FULL
    local db=$1/wal.db
    rm -f "$db" "$db-wal" "$db-shm"
    sqlite3 "$db" "PRAGMA journal_mode=WAL; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);" >/dev/null
    local sql
    sql=$(echo "PRAGMA synchronous=FULL;"
        for i in $(seq 200); do echo "INSERT INTO t(v) VALUES (hex(randomblob(100)));"; done)
    seconds sqlite3 "$db" <<<"$sql"
}

# DIR: speedtest1's own total (seconds), WAL, on the unix VFS.
speedtest() {
    rm -f "$1"/speedtest.db*
    "$SPEEDTEST" --journal wal --size 25 "$1/speedtest.db" | awk '/TOTAL\./ { sub("s$", "", $NF); print $NF }'
    rm -f "$1"/speedtest.db*
}

tree_x() { rm -rf "$1/tree"; mkdir "$1/tree"; seconds tar xf "$SHM/crate.tar" -C "$1/tree"; }
tree_find() { seconds find "$1/tree" -printf '%s %m %p\n'; }
tree_git_status() {
    if [ ! -d "$1/tree/.git" ]; then
        git -C "$1/tree" init -q && git -C "$1/tree" add -A &&
            git -C "$1/tree" -c user.name=b -c user.email=b@b commit -qm tree
    fi >/dev/null
    seconds git -C "$1/tree" status --porcelain
}

stress() { # DIR: stress-ng's metadata stressors, 4 workers, 20,000 operations
    rm -rf "$1/stress"
    mkdir "$1/stress"
    local t0 t1 s
    t0=$(now)
    for s in dentry dir rename utime chmod; do
        stress-ng --temp-path "$1/stress" --"$s" 4 --"$s"-ops 4000 -q >/dev/null
    done
    t1=$(now)
    rm -rf "$1/stress"
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", (b - a) / 1e9 }'
}

# The rows: key|label|unit|hi (more is better) or lo|command (DIR appended).
ROWS=(
    "rr1|fio 4 KiB random read, 1 job|IOPS|hi|fio_rate DIR randread 4k 1"
    "rw1|fio 4 KiB random write, 1 job|IOPS|hi|fio_rate DIR randwrite 4k 1"
    "cr1|fio 4 KiB random read, cached (invalidate=0), 1 job|IOPS|hi|fio_rate DIR randread 4k 1 --invalidate=0"
    "cr2|fio 4 KiB random read, cached, 2 jobs|IOPS|hi|fio_rate DIR randread 4k 2 --invalidate=0"
    "cr4|fio 4 KiB random read, cached, 4 jobs|IOPS|hi|fio_rate DIR randread 4k 4 --invalidate=0"
    "sr|fio 1 MiB sequential read, 1 job|MiB/s|hi|fio_rate DIR read 1m 1"
    "sw|fio 1 MiB sequential write, 1 job|MiB/s|hi|fio_rate DIR write 1m 1"
    "fs|fio 4 KiB random write, fsync after each|IOPS|hi|fio_rate DIR randwrite 4k 1 --fsync=1"
    "pr|1-byte pread (python loop)|us|lo|pread_us DIR"
    "sq|200 sqlite3 commits, WAL, synchronous=FULL|s|lo|sqlite_commits DIR"
    "sp|SQLite speedtest1 --size 25, WAL, synchronous=FULL|s|lo|speedtest DIR"
    "tx|tar x of $(basename "$crate")|s|lo|tree_x DIR"
    "fd|find on the tree|s|lo|tree_find DIR"
    "gs|git status on the tree|s|lo|tree_git_status DIR"
    "st|metadata stress (stress-ng), 20,000 ops, 4 workers|s|lo|stress DIR"
)

declare -A R
# picked KEY: whether row KEY runs.
picked() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }
# run_rows NAME DIR: every row on DIR, medians into R[NAME/key].
run_rows() {
    local name=$1 dir=$2 row key cmd
    # The fio files are laid out once, before anything is timed.
    fio --name=b --directory="$dir" --rw=randread --bs=4k --size="$SIZE" --numjobs=4 \
        --create_only=1 >/dev/null
    for row in "${ROWS[@]}"; do
        IFS='|' read -r key _ _ _ cmd <<<"$row"
        picked "$key" || continue
        : >"$WORK/r"
        for _ in $(seq "$REPS"); do
            ${cmd//DIR/$dir} >>"$WORK/r"
        done
        R[$name/$key]=$(median <"$WORK/r")
    done
}

# ext4 on a loop device over a file, as a kernel filesystem on a block
# device, on each place; tmpfs once, as the memory's limit.
mkdir -p "$SHM/tmpfs"
mount -t tmpfs -o size=3g tmpfs "$SHM/tmpfs"
run_rows tmpfs "$SHM/tmpfs"
for place in $PLACES; do
    dir=${DIRS[$place]}
    truncate -s 2g "$dir/ext4.img"
    mkfs.ext4 -q "$dir/ext4.img"
    LOOPS[$place]=$(losetup --find --show "$dir/ext4.img")
    mkdir -p "$dir/ext4"
    mount "${LOOPS[$place]}" "$dir/ext4"
    run_rows "$place/ext4" "$dir/ext4"
    umount "$dir/ext4"
    losetup -d "${LOOPS[$place]}"
    LOOPS[$place]=""
    rm -f "$dir/ext4.img"

    for col in $COLS; do
        img="$dir/$col.img"
        "$POLLFS" mkfs "file:$img" --size 2g >/dev/null
        MNT="$WORK/$col.mnt"
        mkdir -p "$MNT"
        if [ "$col" = default ]; then
            opts=()
        else
            opts=(--cache-mode "${col%-*}" --uring "${col##*-}" --threads "$THREADS" --cache 1g)
        fi
        "$POLLFS" mount --foreground "${opts[@]}" "file:$img" "$MNT" 2>"$WORK/$col.log" &
        SERVER[$col]=$!
        for _ in $(seq 600); do mountpoint -q "$MNT" && break; sleep 0.05; done
        mountpoint -q "$MNT"
        run_rows "$place/$col" "$MNT"
        kill -TERM "${SERVER[$col]}"
        wait "${SERVER[$col]}"
        unset "SERVER[$col]"
        grep -h "served .* requests" "$WORK/$col.log" | sed "s/^/$place $col: /" >&2
        rm -f "$img"
    done
done

echo "pollfs mount file:IMG (column default: no options; MODE-off: --cache-mode MODE --uring off" \
    "--threads $THREADS --cache 1g, requests read from /dev/fuse; MODE-on: the same with --uring on," \
    "FUSE over io_uring, a queue per CPU); ext4 on a loop device over a file beside pollfs's image;" \
    "tmpfs; fio psync, --size=$SIZE a job, --runtime=$RUNTIME; median of $REPS; $(nproc) CPUs; $(uname -r)"
# shown N: a figure to 3 significant digits, whole numbers from 100 up.
shown() { awk -v v="$1" 'BEGIN { if (v >= 100) printf "%.0f", v; else printf "%.3g", v }'; }
for place in $PLACES; do
    case $place in
    disk) where="both images on a disk: files in ${DISK} ($(findmnt -no SOURCE,FSTYPE -T "$DISK" | tr -s ' ' ' '))" ;;
    shm) where="both images in /dev/shm" ;;
    esac
    echo
    echo "$where"
    echo
    head="| workload | unit"
    line="| --- | ---"
    for col in $COLS; do head+=" | pollfs $col"; line+=" | ---:"; done
    head+=" | ext4 | tmpfs"
    line+=" | ---: | ---:"
    for col in $COLS; do head+=" | $col / ext4 | $col / tmpfs"; line+=" | ---: | ---:"; done
    echo "$head |"
    echo "$line |"
    for row in "${ROWS[@]}"; do
        IFS='|' read -r key label unit better _ <<<"$row"
        picked "$key" || continue
        out="| $label | $unit"
        for fs in $COLS ext4; do out+=" | $(shown "${R[$place/$fs/$key]}")"; done
        out+=" | $(shown "${R[tmpfs/$key]}")"
        for col in $COLS; do
            out+=$(awk -v p="${R[$place/$col/$key]}" -v e="${R[$place/ext4/$key]}" -v t="${R[tmpfs/$key]}" \
                -v b="$better" 'BEGIN {
                if (b == "hi") printf " | %.2f | %.2f", p / e, p / t
                else printf " | %.2f | %.2f", e / p, t / p }')
        done
        echo "$out |"
    done
done
