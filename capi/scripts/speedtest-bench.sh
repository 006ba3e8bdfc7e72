#!/usr/bin/env bash
# SQLite on the pollfs VFS against the unix VFS on tmpfs and on ext4 over a
# loop device (root), in one run: speedtest1 in total and per test line,
# and commits per second with synchronous=FULL (rollback journal and WAL).
#   capi/scripts/speedtest-bench.sh [SIZE] [COMMITS]   (defaults 50, 2000)
# The pollfs VFS runs on the emulated NVMe device (`emu`) with a 512 MiB
# cache. Prints each command and the tables.
set -euo pipefail
cd "$(dirname "$0")/../.."
size=${1:-50}
commits=${2:-2000}
capi/scripts/sqlite.sh >/dev/null
bin=$PWD/target/release
work=$(mktemp -d)
shm=$(mktemp -d /dev/shm/pollfs-speedtest.XXXXXX)
ext4=$work/ext4
img=$work/ext4.img
loop=
cleanup() {
    mountpoint -q "$ext4" && umount "$ext4"
    [ -n "$loop" ] && losetup -d "$loop"
    rm -rf "$work" "$shm"
}
trap cleanup EXIT
truncate -s 2G "$img"
loop=$(losetup -f --show "$img")
mkfs.ext4 -q "$loop"
mkdir -p "$ext4"
mount "$loop" "$ext4"

export POLLFS_CACHE_MB=512 POLLFS_SIZE_MB=2048
run() { # label, command...
    local label=$1
    shift
    echo "+ $*" >&2
    "$@" > "$work/$label.out"
}
run pollfs "$bin/speedtest1" --vfs pollfs --size "$size" speedtest.db
run tmpfs "$bin/speedtest1" --size "$size" "$shm/speedtest.db"
run ext4 "$bin/speedtest1" --size "$size" "$ext4/speedtest.db"

echo
echo "speedtest1 --size $size: seconds per test (ratio: ext4 / pollfs, > 1 means pollfs is faster)"
python3 - "$work" <<'PY'
import re, sys
work = sys.argv[1]
def parse(label):
    rows = {}
    for line in open(f"{work}/{label}.out"):
        m = re.match(r"\s*(\d+|TOTAL) - ?(.*?)\.*\s+([\d.]+)s$", line) or \
            re.match(r"\s*(TOTAL)()\.+\s+([\d.]+)s$", line.strip())
        if m:
            rows[m.group(1)] = (m.group(2).strip(), float(m.group(3)))
    return rows
p, t, e = parse("pollfs"), parse("tmpfs"), parse("ext4")
print("%-5s %-52s %8s %8s %8s %6s" % ("test", "", "pollfs", "tmpfs", "ext4", "ratio"))
for k, (name, s) in p.items():
    ts, es = t.get(k, ("", 0))[1], e.get(k, ("", 0))[1]
    print("%-5s %-52s %8.3f %8.3f %8.3f %6.2f" % (k, name[:52], s, ts, es, es / s if s else 0))
PY

echo
echo "commits per second, synchronous=FULL, one 100-byte insert each"
printf '%-7s %-7s %-6s %7s %8s %10s\n' vfs journal fs commits seconds "commits/s"
for mode in delete wal; do
    for where in pollfs tmpfs ext4; do
        case $where in
        pollfs) cmd=("$bin/sqlite-commits" pollfs "commits-$mode.db" "$commits" "$mode") ;;
        tmpfs) cmd=("$bin/sqlite-commits" unix "$shm/commits-$mode.db" "$commits" "$mode") ;;
        ext4) cmd=("$bin/sqlite-commits" unix "$ext4/commits-$mode.db" "$commits" "$mode") ;;
        esac
        echo "+ ${cmd[*]}" >&2
        line=$("${cmd[@]}")
        printf '%s\n' "$line" | awk -v w="$where" '{printf "%-7s %-7s %-6s %7s %8s %10s\n", $1, $2, w, $3, $4, $5}'
    done
done
