# What a sync through the mount costs, in the engine's counts (`pollfs
# stat --json`), never timed: 40 4 KiB overwrites and 40 4 KiB appends,
# each followed by fdatasync (an append and an fdatasync is a SQLite WAL
# commit), then 20 of each with fsync. Each fsync is one sync (the mount
# syncs nowhere else: not on flush, not on release) and costs at most one
# log write, its FUA write; the syncs flush nothing themselves, so a
# flush comes only with the background write-home's or a checkpoint's
# work. host-tests/tests/sync_cost.rs counts the same in the file
# backend's system calls. Sourced by run.sh.

echo "== what a sync costs through the mount (counts, not time)"
fresh synccost 256m
start synccost
python3 - "$(mnt synccost)/wal" 0 <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, b"w" * 4096, 0)
os.fsync(fd)
PY
"$POLLFS" stat --json "$(mnt synccost)" >"$WORK/synccost.a.json"
python3 - "$(mnt synccost)/wal" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
page = b"c" * 4096
for i in range(40):
    os.pwrite(fd, page, 0)
    os.fdatasync(fd)
    os.pwrite(fd, page, 4096 * (i + 1))
    os.fdatasync(fd)
for i in range(20):
    os.pwrite(fd, page, 0)
    os.fsync(fd)
    os.pwrite(fd, page, 4096 * (i + 41))
    os.fsync(fd)
PY
"$POLLFS" stat --json "$(mnt synccost)" >"$WORK/synccost.b.json"
jq -n --slurpfile a "$WORK/synccost.a.json" --slurpfile b "$WORK/synccost.b.json" \
    '$b[0].counters as $b | $a[0].counters | with_entries(.value = $b[.key] - .value)' \
    >"$WORK/synccost.json"
jq -c '{syncs, log_writes, dev_writes, dev_flushes, checkpoints, homed_pages}' "$WORK/synccost.json" |
    sed 's/^/  /'
check "sync cost: one sync per fsync (120)" jq_true "$WORK/synccost.json" '.syncs == 120'
check "sync cost: at most one log write per sync" jq_true "$WORK/synccost.json" \
    '.log_writes <= .syncs'
check "sync cost: the syncs flush nothing themselves" jq_true "$WORK/synccost.json" \
    '.dev_flushes == 0 or .homed_pages + .checkpoints > 0'
check "sync cost: unmounted cleanly" stop synccost
