# Metadata under stress: stress-ng's filesystem stressors on the mount,
# each with 2 workers for 1 second (files kept), then the tree's checksum
# (names, kinds, modes, owners, sizes, link counts, targets, extended
# attributes, contents), a clean unmount, fsck, a remount and the same
# checksum; then its files go. All of it once in each cache mode (kernel,
# direct), or in $CACHE_MODE alone if it is set.
# Needs root, /dev/fuse, stress-ng, python3.
# Usage: tests/mount/stress.sh [POLLFS_BINARY]   (`just mount-stress`)
set -uo pipefail
POLLFS=${1:-target/release/pollfs}
MODES=${CACHE_MODE:-kernel direct}
source "$(dirname "$0")/lib.sh"

echo "== stress-ng's metadata stressors, each followed by fsck and a remount"
STRESSORS="dir dentry rename link chmod chown utime filename iomix fallocate xattr"
if ! command -v stress-ng >/dev/null 2>&1; then
    echo "FAIL: stress-ng is not installed (Debian's stress-ng)"
    exit 1
fi
# tree_sum DIR: one checksum of everything under DIR.
tree_sum() {
    python3 - "$1" <<'PY'
import hashlib, os, stat, sys
top = sys.argv[1]
h = hashlib.sha256()
for root, dirs, files in os.walk(top):
    dirs.sort()
    for name in sorted(dirs + files):
        p = os.path.join(root, name)
        st = os.lstat(p)
        h.update(repr((os.path.relpath(p, top), stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode),
                       st.st_uid, st.st_gid, st.st_size, st.st_nlink)).encode())
        for n in sorted(os.listxattr(p, follow_symlinks=False)):
            h.update(repr((n, os.getxattr(p, n, follow_symlinks=False))).encode())
        if stat.S_ISLNK(st.st_mode):
            h.update(os.fsencode(os.readlink(p)))
        elif stat.S_ISREG(st.st_mode):
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
print(h.hexdigest())
PY
}
# run_mode: every stressor in $CACHE_MODE on a fresh image.
run_mode() {
    echo "-- cache mode $CACHE_MODE"
    fresh stress 1g
    start stress --threads 2
    S=$(mnt stress)
    for s in $STRESSORS; do
        mkdir -p "$S/$s"
        # iomix and fallocate would take 1 GiB and 16 MiB a worker.
        if stress-ng "--$s" 2 --timeout 1s --temp-path "$S/$s" --keep-files \
            --iomix-bytes 32m --fallocate-bytes 8m >"$WORK/stress-$s.log" 2>&1; then
            ok "stress ($CACHE_MODE): $s ran without a failure ($(grep -c . "$WORK/stress-$s.log") lines of report)"
        else
            fail "stress ($CACHE_MODE): $s"
            tail -15 "$WORK/stress-$s.log"
        fi
        before=$(tree_sum "$S")
        check "stress ($CACHE_MODE): $s: unmounted cleanly" stop stress
        check "stress ($CACHE_MODE): $s: fsck is clean" fsck_clean stress
        start stress --threads 2
        check "stress ($CACHE_MODE): $s: the tree's checksum is the same after the remount" \
            test "$(tree_sum "$S")" = "$before"
        rm -rf "${S:?}/$s"
    done
    check "stress ($CACHE_MODE): unmounted cleanly at the end" stop stress
}
for CACHE_MODE in $MODES; do
    run_mode
done

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
