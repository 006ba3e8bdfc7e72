#!/usr/bin/env bash
# Real programs on `pollfs mount`, each on a fresh file: image: fio with
# verification, a concurrent truncation checker, sqlite3 across a remount,
# SIGKILL in the middle of a sync-heavy load, fallocate(1) and truncate(1),
# a source tree (tar, diff, git, make, links, renames; tree.sh), POSIX
# rules against tmpfs as root and as another user, mount(8)'s helper and
# `pollfs umount` (posix.sh), writers at two thirds full and until the
# device is full (fill.sh), extended attributes and ACLs through cp -a,
# tar, getfacl/setfacl and getfattr/setfattr (xattr_roundtrip.sh).
# Needs root, /dev/fuse, fio, sqlite3, util-linux, python3, jq, tar, gzip,
# git, make, acl, attr.
# Usage: tests/mount/run.sh [POLLFS_BINARY]   (`just mount-test`)
set -uo pipefail
POLLFS=${1:-target/release/pollfs}
source "$(dirname "$0")/lib.sh"

echo "== fio: verified concurrent I/O with fsync, and a truncation checker beside it"
fresh fio 1g
start fio --threads 4
FIO_DIR=$(mnt fio) fio --verify_state_save=0 --output-format=json --output="$WORK/fio.json" "$HERE/verify.fio" \
    >"$WORK/fio.out" 2>&1 &
fio_pid=$!
python3 "$HERE/truncator.py" "$(mnt fio)/truncated" 20 1 &
trunc_pid=$!
check "fio ran" wait "$fio_pid" || cat "$WORK/fio.out"
check "the truncation checker saw every byte as modelled" wait "$trunc_pid"
if [ -s "$WORK/fio.json" ]; then
    jq -r '.jobs[] | "  \(.jobname): error \(.error), wrote \(.write.io_bytes) bytes, read (verified) \(.read.io_bytes) bytes, \(.elapsed) s"' "$WORK/fio.json"
    check "every fio job finished without error (verify=crc32c, verify_fatal)" \
        jq_true "$WORK/fio.json" 'all(.jobs[]; .error == 0)'
    check "every fio job read back and verified what it wrote" \
        jq_true "$WORK/fio.json" 'all(.jobs[]; .read.io_bytes >= .write.io_bytes and .write.io_bytes > 0)'
else
    fail "fio wrote no JSON"
fi
check "fio: no verify error reported" bash -c "! grep -qi 'verify' '$WORK/fio.out'"
check "fio: unmounted cleanly on SIGTERM" stop fio
check "fio: fsck is clean" fsck_clean fio

echo "== sqlite3: a schema, 60,000 rows in transactions, updates, deletes, VACUUM; remount"
fresh sqlite 512m
start sqlite
db=$(mnt sqlite)/test.db
# Six transactions of 10,000 rows each, then the rest of the load.
{
    cat <<'SQL'
CREATE TABLE item(id INTEGER PRIMARY KEY, grp INTEGER NOT NULL, name TEXT NOT NULL, body BLOB);
CREATE INDEX item_grp ON item(grp);
CREATE TABLE tally(grp INTEGER PRIMARY KEY, n INTEGER NOT NULL);
SQL
    for first in 1 10001 20001 30001 40001 50001; do
        cat <<SQL
BEGIN;
WITH RECURSIVE c(x) AS (SELECT $first UNION ALL SELECT x + 1 FROM c WHERE x < $((first + 9999)))
INSERT INTO item(grp, name, body) SELECT x % 97, 'item-' || x, randomblob(100 + x % 300) FROM c;
COMMIT;
SQL
    done
    cat <<'SQL'
BEGIN;
UPDATE item SET name = name || '-updated', body = randomblob(50) WHERE grp % 5 = 0;
DELETE FROM item WHERE grp % 7 = 3;
INSERT INTO tally SELECT grp, count(*) FROM item GROUP BY grp;
COMMIT;
VACUUM;
PRAGMA journal_mode = WAL;
BEGIN;
UPDATE item SET name = name || '-wal' WHERE id % 1000 = 1;
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
PRAGMA journal_mode = DELETE;
PRAGMA integrity_check;
SELECT count(*), sum(length(body)), sum(length(name)) FROM item;
SELECT sum(n) FROM tally;
SQL
} | sqlite3 "$db" >"$WORK/sqlite1.out" 2>&1
cat "$WORK/sqlite1.out" | sed 's/^/  /'
check "sqlite3: integrity_check is ok after the load" grep -qx ok "$WORK/sqlite1.out"
check "sqlite3: unmounted cleanly on SIGTERM" stop sqlite
check "sqlite3: fsck is clean" fsck_clean sqlite
start sqlite
sqlite3 "$db" <<'SQL' >"$WORK/sqlite2.out" 2>&1
PRAGMA integrity_check;
SELECT count(*), sum(length(body)), sum(length(name)) FROM item;
SELECT sum(n) FROM tally;
SQL
check "sqlite3: after a remount, integrity_check is ok and the counts are the same" \
    cmp -s <(grep -v '^wal$\|^delete$\|^0|' "$WORK/sqlite1.out") "$WORK/sqlite2.out"
check "sqlite3: unmounted cleanly again" stop sqlite

echo "== kill -9 in the middle of a sync-heavy load"
fresh crash 1g
start crash --threads 4
for w in 1 2 3; do
    python3 "$HERE/writer.py" "$(mnt crash)" "$WORK/writer$w.log" "$w" "$w" &
    writers[$w]=$!
done
sleep 4
# On a loaded machine a writer may take longer to start: the kill comes
# once each has made something durable (or after a minute).
for _ in $(seq 600); do
    [ -s "$WORK/writer1.log" ] && [ -s "$WORK/writer2.log" ] && [ -s "$WORK/writer3.log" ] && break
    sleep 0.1
done
crash crash
for w in 1 2 3; do
    check "crash: writer $w stopped only because the mount went away" wait "${writers[$w]}"
done
check "crash: fsck of the crashed image is clean" fsck_clean crash
start crash
check "crash: every file and record synced before the kill is whole" \
    python3 "$HERE/crashcheck.py" "$(mnt crash)" "$WORK"/writer*.log
check "crash: unmounted cleanly after recovery" stop crash
check "crash: fsck is clean" fsck_clean crash

echo "== fallocate(1) and truncate(1): holes, zero ranges, allocation, sizes"
fresh holes 256m
start holes
check "holes: every byte as modelled after each step" python3 "$HERE/holes.py" "$(mnt holes)"
check "holes: unmounted cleanly" stop holes
start holes
check "holes: the last state survives a remount" \
    python3 -c "import os,sys; d=open(sys.argv[1],'rb').read(); sys.exit(0 if d == bytes(8<<20) else 1)" \
    "$(mnt holes)/holes"
check "holes: unmounted cleanly again" stop holes
check "holes: fsck is clean" fsck_clean holes

source "$HERE/fill.sh"
source "$HERE/tree.sh"
source "$HERE/posix.sh"
source "$HERE/xattr_roundtrip.sh"
source "$HERE/sync_cost.sh"
source "$HERE/uring.sh"

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
