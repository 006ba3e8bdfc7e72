#!/usr/bin/env bash
# Where a sync through the mount goes, in counts that do not depend on
# speed: the FUSE requests the kernel sends (its fuse_request_send
# tracepoint, in a trace instance of its own, filtered to the mount's
# connection) and the server's system calls (`strace -c -f`), per sync,
# for N syncs of each workload; and, beside it, ext4 on a loop device
# over a file in the same directory doing the same, counted at the loop
# device (writes and flushes from its /sys/block/loopN/stat). The images
# are files in DIR (/var/tmp by default: a disk, where a flush costs).
# Workloads: `over` (4 KiB overwrite at 0, fdatasync), `append` (4 KiB
# append, fdatasync), `fsync` (4 KiB overwrite, fsync), `sqlite` (one
# INSERT in its own transaction, WAL, synchronous=FULL: a write to the
# WAL and an fdatasync).
# Needs root, tracefs, strace, losetup, mkfs.ext4, python3.
# Usage: tests/mount/sync_trace.sh [POLLFS_BINARY]   (`just mount-sync-trace`)
# Environment: N (200), DIR (/var/tmp), KINDS ("over append fsync sqlite"),
# ARGS (extra `pollfs mount` arguments, e.g. "--uring off").
set -euo pipefail
POLLFS=$(realpath "${1:-target/release/pollfs}")
N=${N:-200}
KINDS=${KINDS:-over append fsync sqlite}
ARGS=${ARGS:-}
D=$(mktemp -d "${DIR:-/var/tmp}/pollfs-sync-trace.XXXXXX")
TRACING=/sys/kernel/tracing
[ -d "$TRACING/instances" ] || mount -t tracefs nodev "$TRACING"
T="$TRACING/instances/pollfs-sync-trace.$$"
mkdir "$T"
SRV="" LOOP=""
cleanup() {
    set +e
    echo 0 >"$T/events/fuse/enable"
    umount "$D/mnt" 2>/dev/null
    [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV"
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    rmdir "$T"
    rm -rf "$D"
}
trap cleanup EXIT

# The workload: sets up, says "go", waits for a line, runs N syncs,
# says "done", waits for a line.
cat >"$D/load.py" <<'PY'
import os, sys
path, kind, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
page = b"x" * 4096
def say(w):
    sys.stdout.write(w + "\n"); sys.stdout.flush(); sys.stdin.readline()
if kind == "sqlite":
    import sqlite3
    db = sqlite3.connect(path + ".db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL"); db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t(v TEXT)")
    db.execute("INSERT INTO t(v) VALUES (hex(randomblob(100)))")
    say("go")
    for _ in range(n):
        db.execute("INSERT INTO t(v) VALUES (hex(randomblob(100)))")
    say("done")
    sys.exit(0)
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, page, 0); os.fsync(fd)
say("go")
for i in range(n):
    os.pwrite(fd, page, 4096 * (i + 1) if kind == "append" else 0)
    (os.fsync if kind == "fsync" else os.fdatasync)(fd)
say("done")
PY

# run ENGINE KIND: one workload on a fresh image.
run() {
    local engine=$1 kind=$2 st="" conn
    mkdir -p "$D/mnt"
    if [ "$engine" = ext4 ]; then
        truncate -s 1g "$D/img"
        mkfs.ext4 -q "$D/img"
        LOOP=$(losetup --find --show "$D/img")
        mount "$LOOP" "$D/mnt"
    else
        "$POLLFS" mkfs "file:$D/img" --size 1g >/dev/null
        # shellcheck disable=SC2086
        "$POLLFS" mount --foreground $ARGS "file:$D/img" "$D/mnt" 2>"$D/log" &
        SRV=$!
        for _ in $(seq 600); do mountpoint -q "$D/mnt" && break; sleep 0.05; done
        mountpoint -q "$D/mnt"
    fi
    coproc LOAD { python3 "$D/load.py" "$D/mnt/f" "$kind" "$N"; }
    read -r _ <&"${LOAD[0]}"
    local l0 l1
    if [ "$engine" = ext4 ]; then
        read -ra l0 <"/sys/block/${LOOP#/dev/}/stat"
    else
        conn=$(mountpoint -d "$D/mnt" | cut -d: -f2)
        echo "connection == $conn" >"$T/events/fuse/filter"
        : >"$T/trace"
        echo 1 >"$T/events/fuse/enable"
        strace -c -f -p "$SRV" -o "$D/strace" 2>/dev/null &
        st=$!
        # strace attaches to every thread before it prints its first line.
        sleep 1
    fi
    echo >&"${LOAD[1]}"
    read -r _ <&"${LOAD[0]}"
    if [ "$engine" = ext4 ]; then
        read -ra l1 <"/sys/block/${LOOP#/dev/}/stat"
        # Fields 5 (writes completed) and 16 (flushes completed).
        awk -v k="$kind" -v n="$N" -v w=$((l1[4] - l0[4])) -v f=$((l1[15] - l0[15])) \
            'BEGIN { printf "%-7s ext4 on loop: device writes %.2f, flushes %.2f per sync\n", k, w / n, f / n }'
    else
        echo 0 >"$T/events/fuse/enable"
        kill -INT "$st"
        wait "$st" || true
        echo "$kind pollfs: FUSE requests per sync:" \
            "$(grep -o 'opcode [0-9]* ([A-Z_]*)' "$T/trace" | awk '{print $3}' | sort | uniq -c |
                awk -v n="$N" '{ gsub(/[()]/, "", $2); printf "%s %.2f  ", $2, $1 / n }')"
        echo "$kind pollfs: server system calls per sync:" \
            "$(awk -v n="$N" '$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" { printf "%s %.2f  ", $NF, $4 / n }' "$D/strace")"
    fi
    echo >&"${LOAD[1]}"
    wait "$LOAD_PID" 2>/dev/null || true
    umount "$D/mnt"
    if [ -n "$SRV" ]; then wait "$SRV" || true; SRV=""; fi
    if [ -n "$LOOP" ]; then losetup -d "$LOOP"; LOOP=""; fi
    rm -f "$D/img"
}

echo "$N syncs of each workload; images in $(dirname "$D") ($(findmnt -no SOURCE,FSTYPE -T "$D" | tr -s ' ' ' '));" \
    "pollfs mount ${ARGS:-(default options)}; $(uname -r)"
for kind in $KINDS; do
    run pollfs "$kind"
    run ext4 "$kind"
done
