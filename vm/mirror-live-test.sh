#!/bin/bash
# Live administration of a mounted mirror: in one boot, a mirror of two
# file legs (64 MiB each, on the guest's tmpfs) is mounted (`pollfs mount`,
# which serves the mirror's control socket under /run/pollfs), and a
# writer writes 64 KiB chunks into it, each a file synced before it is
# counted. While it writes, another process (`pollfs mirror`, through the
# socket) shows the mirror live, fails leg 1, and rejoins it: the rejoin
# returns at once, `status` shows the copy's progress, `rejoin --wait`
# waits for it. After more chunks the writer stops, the mirror is
# unmounted, `pollfs mirror status` (now from the headers) shows it clean
# with both legs in sync, the legs are byte-equal over the mirror's data,
# and every synced chunk is read back from each leg mounted alone.
#
# Exit status 0 only when every step passed. Usage: bash vm/mirror-live-test.sh
source "$(dirname "$0")/lib.sh"

started=$SECONDS
ensure_packages
ensure_kernel
build_static --bin pollfs

modules="fuse"
extra="$bin_dir/pollfs:bin/pollfs $vm_dir/guest-common.sh:guest-common.sh $vm_dir/guest-writer.sh:guest-writer.sh"
make_initramfs "$cache/mirror-live-initrd.gz" <<'INIT'
#!/bin/busybox sh
. /guest-common.sh
TEST=MIRROR-LIVE
. /guest-writer.sh
mounted() { grep -q " $1 fuse.pollfs " /proc/mounts; }
MIB=64
DATA=$(( (MIB << 20) - 8192 ))
M="mirror:(file:/legs/leg0,file:/legs/leg1)"
# `pollfs mount --foreground ARGS /mnt` as $mp, once the mount is there.
serve() {
    /bin/pollfs mount --foreground "$@" /mnt 2> /tmp/mount.err &
    mp=$!
    i=0
    while ! mounted /mnt && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    mounted /mnt || { cat /tmp/mount.err; fail "mount $*"; }
}

step "a mirror of two 64 MiB file legs, mounted"
mkdir -p /legs /mnt && mount -t tmpfs -o size=200m none /legs || fail "tmpfs"
/bin/pollfs mkfs --size ${MIB}m "$M" || fail "mkfs"
serve --cache 16m "$M"
ls -l /run/pollfs || fail "no control socket"

step "a writer: 64 KiB chunks, each synced before it is counted"
(
    n=0
    while [ ! -e /tmp/stop ]; do
        dd if=/dev/urandom of=/tmp/chunk bs=65536 count=1 2>/dev/null
        dd if=/tmp/chunk of=/mnt/c$n bs=65536 conv=fsync 2>/dev/null || exit 1
        echo "SYNCED $n $(md5sum < /tmp/chunk | cut -d' ' -f1)"
        n=$((n + 1))
    done
) > /tmp/synced &
w=$!
wait_synced 16 3000
mirror status "$M"
grep -q '(open, live)' /tmp/status || fail "status did not come from the mount"
both_in_sync "a leg out of sync"

step "fail leg 1 through the socket; the writer goes on"
mirror fail "$M" 1
grep -q '^leg 1 .*: failed' /tmp/status || fail "leg 1 not failed"
at=$(synced)
wait_synced $((at + 32)) 3000
echo "$(( $(synced) - at )) chunks synced on leg 0 alone"

step "rejoin leg 1 through the socket: it returns at once"
mirror rejoin "$M" 1
grep -q '^leg 1 .*: \(resyncing\|stale\|in sync\)' /tmp/status || fail "leg 1 not rejoined"
for k in 1 2 3; do
    sleep 0.5
    mirror status "$M" | grep '^leg 1'
done
# `rejoin --wait` waits for the copy the rejoin above started (or
# returns at once if it is done).
t0=$(cut -d' ' -f1 /proc/uptime)
mirror rejoin --wait "$M" 1
echo "rejoin --wait returned at $(cut -d' ' -f1 /proc/uptime) s (waited from $t0 s)"
both_in_sync "a leg out of sync after the rejoin"
at=$(synced)
wait_synced $((at + 16)) 3000

step "the writer stops; unmount"
touch /tmp/stop
wait $w || fail "the writer failed a write"
last="$(grep '^SYNCED' /tmp/synced | tail -n1 | cut -d' ' -f2)"
echo "$((last + 1)) chunks synced"
umount /mnt || fail "umount"
wait $mp || { cat /tmp/mount.err; fail "the mount exited with an error"; }
cat /tmp/mount.err
[ -e /run/pollfs/*.sock ] && fail "the control socket outlived the mount"
mirror status "$M"
grep -q '(open, live)' /tmp/status && fail "status still live after the unmount"
grep -q 'clean$' /tmp/status || fail "the mirror is not clean"
both_in_sync "a leg out of sync at the end"
cmp -n $DATA /legs/leg0 /legs/leg1 || fail "the legs differ"
echo "the legs' first $DATA bytes are equal"

for leg in 1 0; do
    step "every synced chunk, from leg $leg mounted alone"
    serve "file:/legs/leg$leg"
    bad=0
    while read -r tag n sum; do
        [ "$(md5sum < /mnt/c$n | cut -d' ' -f1)" = "$sum" ] || { echo "chunk $n differs"; bad=$((bad + 1)); }
    done < /tmp/synced
    echo "leg $leg: $((last + 1)) synced chunks read back, $bad differ"
    umount /mnt || fail "umount leg $leg"
    wait $mp
    [ $bad -eq 0 ] || fail "leg $leg lacks synced chunks"
done
/bin/pollfs fsck "$M" || fail "fsck"

passed
INIT

img="$cache/nvme-mirror-live.img"
out="$cache/console-mirror-live.log"
rm -f "$img"
# QEMU's NVMe disk is not used here (the legs are files in the guest's
# memory), but boot() always attaches one.
truncate -s 16M "$img"
log "booting (console: $out)"
boot "$cache/mirror-live-initrd.gz" "$img" "$out" "" "no_timer_check"
verdict "$out" VM-MIRROR-LIVE-OK "live mirror test"
log "all passed in $((SECONDS - started)) s"
