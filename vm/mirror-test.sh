#!/bin/bash
# A mirror over two real NVMe/TCP targets: two nvmet-tcp subsystems in
# the test VM (leg0 on 127.0.0.1:4420, leg1 on 127.0.0.1:4421, each a
# 64 MiB tmpfs file). In one boot: `pollfs mkfs` on
# mirror:(nvme-tcp://...,nvme-tcp://...); a writer that syncs after every
# 64 KiB chunk (driver/examples/mirror_check.rs) runs while leg 1's port
# stops serving its subsystem; the writer must see the leg fail (the legs
# are named with a 5 s reconnect window) and go on syncing; it is then killed with SIGKILL. With the port back, `pollfs
# mirror status` (another process, from the headers) shows leg 1 failed;
# every synced chunk is read back from leg 0; `pollfs mirror rejoin` copies
# leg 1 back, only in the regions its write-intent bitmap marked (the
# copy size is printed, COPY-SIZE); the two backing files are byte-equal over the mirror's data
# (everything but the last two pages, the per-leg headers, which must
# agree on everything but the leg's own position); leg 0 is then dropped
# and every synced chunk read back from leg 1 alone; leg 0 rejoins (copied
# only where that read's mount and unmount wrote, printed), the
# legs are compared again, and `pollfs fsck` passes.
#
# Exit status 0 only when every step passed. Usage: bash vm/mirror-test.sh
source "$(dirname "$0")/lib.sh"

started=$SECONDS
ensure_packages
ensure_kernel
build_static --example mirror_check --bin pollfs

modules="configfs nvmet nvmet-tcp crc32c_generic"
extra="$bin_dir/examples/mirror_check:bin/mirror_check $bin_dir/pollfs:bin/pollfs"
extra="$extra $vm_dir/guest-common.sh:guest-common.sh $vm_dir/guest-writer.sh:guest-writer.sh"
extra="$extra $vm_dir/nvmet.sh:nvmet.sh"
make_initramfs "$cache/mirror-initrd.gz" <<'INIT'
#!/bin/busybox sh
. /guest-common.sh
. /nvmet.sh
TEST=MIRROR
. /guest-writer.sh
MIB=64
# The mirror's data: all but the last two 4 KiB pages (the headers).
DATA=$(( (MIB << 20) - 8192 ))
# Both backing files hold the same bytes over the mirror's data.
legs_equal() {
    cmp -n $DATA /legs/leg0 /legs/leg1 || fail "the legs differ ($1)"
    echo "the legs' first $DATA bytes are equal"
    /bin/mirror_check headers "$U0" "$U1" || fail "headers ($1)"
}

step "two nvmet-tcp subsystems on 127.0.0.1:4420 and :4421"
mkdir /legs && mount -t tmpfs -o size=160m none /legs || fail "tmpfs"
nvmet_base || fail "loopback and configfs"
nvmet_file_target leg0 1 4420 /legs/leg0 $MIB || fail "target leg0"
nvmet_file_target leg1 2 4421 /legs/leg1 $MIB || fail "target leg1"
# A reset tries to reach a target again for 5 s (30 s by default), so a
# leg that is gone is dropped after about three times that.
U0="nvme-tcp://127.0.0.1:4420/leg0?reconnect=5000"
U1="nvme-tcp://127.0.0.1:4421/leg1?reconnect=5000"
M="mirror:($U0,$U1)"

step "mkfs on $M"
/bin/pollfs mkfs --force "$M" || fail "mkfs"
mirror status "$M"
both_in_sync "a new mirror with a leg out of sync"

step "a syncing writer; leg 1's port stops serving its subsystem"
/bin/mirror_check writer "$U0" "$U1" > /tmp/synced 2>/tmp/writer.err &
w=$!
wait_synced 48 900
echo "$(synced) chunks synced with both legs"
nvmet_port_unlink 2 leg1 || fail "unlink"
echo "leg1's port unlinked"
wait_leg_failed 1 1200
wait_synced $((at + 48)) 900
kill_writer

step "leg1's port back; the headers say leg 1 failed"
nvmet_port_link 2 leg1 || fail "link"
mirror status "$M"
grep -q '^leg 1 .*: failed' /tmp/status || fail "leg 1 not recorded failed"
grep -q '^leg 0 .*: in sync$' /tmp/status || fail "leg 0 not in sync"

step "every synced chunk, read from leg 0"
/bin/mirror_check verify "$U0" "$U1" "$last" || fail "synced data after the kill"

grep -q 'bitmap: [1-9][0-9]* of 64 regions' /tmp/status || fail "no region marked while leg 1 was out"

step "rejoin leg 1 (waits for the resync)"
t0=$(cut -d' ' -f1 /proc/uptime)
/bin/pollfs mirror rejoin "$M" 1 > /tmp/rejoin || fail "rejoin 1"
echo "rejoin took $t0 .. $(cut -d' ' -f1 /proc/uptime) s of uptime"
cat /tmp/rejoin
copied="$(sed -n 's/^resync copied \(.*\) of the mirror.*/\1/p' /tmp/rejoin)"
[ -n "$copied" ] || fail "the rejoin reports no copy"
[ "$copied" != "64.0 MiB" ] || fail "leg 1 was copied whole"
echo "COPY-SIZE: leg 1 away for $((last + 1 - at)) synced chunks of 64 KiB: $copied copied of 64 MiB ($(grep 'bitmap:' /tmp/status))"
mirror status "$M"
both_in_sync "a leg out of sync after the rejoin"
grep -q 'clean$' /tmp/status || fail "the mirror is not clean after the rejoin"
legs_equal "after the resync"

step "leg 0 dropped: every synced chunk, read from leg 1"
mirror fail "$M" 0
mirror status "$M"
grep -q '^leg 0 .*: failed' /tmp/status || fail "leg 0 not recorded failed"
/bin/mirror_check verify "$U0" "$U1" "$last" || fail "synced data on leg 1"

step "rejoin leg 0 (away while the check above mounted the filesystem)"
/bin/pollfs mirror rejoin "$M" 0 > /tmp/rejoin || fail "rejoin 0"
cat /tmp/rejoin
copied="$(sed -n 's/^resync copied \(.*\) of the mirror.*/\1/p' /tmp/rejoin)"
[ "$copied" != "64.0 MiB" ] || fail "leg 0 was copied whole"
echo "COPY-SIZE: leg 0 away during one mount and unmount: ${copied:-nothing} copied of 64 MiB"
mirror status "$M"
both_in_sync "a leg out of sync after the second rejoin"
legs_equal "after the second resync"
/bin/pollfs fsck "$M" || fail "fsck"

passed
INIT

img="$cache/nvme-mirror.img"
out="$cache/console-mirror.log"
rm -f "$img"
# QEMU's NVMe disk is not used here (the legs are files in the guest's
# memory), but boot() always attaches one.
truncate -s 16M "$img"
log "booting (console: $out)"
boot "$cache/mirror-initrd.gz" "$img" "$out" "" "no_timer_check"
verdict "$out" VM-MIRROR-OK "mirror test"
log "all passed in $((SECONDS - started)) s"
