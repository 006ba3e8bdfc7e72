#!/bin/bash
# Two vfio legs in one volume: two QEMU NVMe controllers in the test VM,
# both bound to vfio-pci, opened in one VFIO container (one IOMMU space,
# the page-cache frames mapped once for both). In one boot:
#   - stripe:(vfio:A,vfio:B): `pollfs mkfs`, a writer that syncs after
#     every 64 KiB chunk (device/examples/volume_check.rs) writes 4 MiB, a
#     second process reads every chunk back, `pollfs fsck`;
#   - mirror:(vfio:A,vfio:B): `pollfs mkfs`, the writer runs until killed;
#     meanwhile leg 1's controller loses bus mastering (its PCI command
#     register, written through sysfs), so it can no longer reach memory:
#     it reports a fatal status, its resets fail and the writer must see
#     the leg fail and go on syncing on leg 0. After SIGKILL, `pollfs
#     mirror status` shows leg 1 failed; every synced chunk is read back;
#     `pollfs mirror rejoin` copies leg 1 back (its controller reopened
#     with bus mastering on); leg 0 is dropped and every synced chunk is
#     read from leg 1 alone; leg 0 rejoins; `pollfs fsck`.
# The host then checks that the two backing images hold the same bytes
# over the mirror's data (all but the last two pages, the legs' headers).
#
# Exit status 0 only when every step passed. Usage: bash vm/vfio-volume-test.sh
source "$(dirname "$0")/lib.sh"

started=$SECONDS
ensure_packages
ensure_kernel
build_static --example volume_check --bin pollfs

modules="vfio_iommu_type1 vfio-pci"
extra="$bin_dir/examples/volume_check:bin/volume_check $bin_dir/pollfs:bin/pollfs"
extra="$extra $vm_dir/guest-common.sh:guest-common.sh $vm_dir/guest-writer.sh:guest-writer.sh"
make_initramfs "$cache/vfio-volume-initrd.gz" <<'INIT'
#!/bin/busybox sh
. /guest-common.sh
TEST=VFIO-VOLUME
. /guest-writer.sh
# Byte 0 of the PCI command register of controller $1: bit 2 is bus
# mastering.
command_byte() {
    dd if=/sys/bus/pci/devices/$1/config bs=1 skip=4 count=1 2>/dev/null | od -An -tu1 | tr -d ' '
}
set_command_byte() {
    printf "\\$(printf '%03o' "$2")" | dd of=/sys/bus/pci/devices/$1/config bs=1 seek=4 count=1 conv=notrunc 2>/dev/null
}

set -- $(nvme_addrs)
A="${1:-}"; B="${2:-}"
[ -n "$A" ] && [ -n "$B" ] || fail "two NVMe controllers expected, found '$A' '$B'"
bind_vfio "$A" || fail "bind $A"
bind_vfio "$B" || fail "bind $B"
echo "controllers $A (group $(basename "$(readlink /sys/bus/pci/devices/$A/iommu_group)")) and $B (group $(basename "$(readlink /sys/bus/pci/devices/$B/iommu_group)")), both on vfio-pci"

S="stripe:(vfio:$A,vfio:$B)"
step "mkfs on $S"
/bin/pollfs mkfs --force "$S" || fail "mkfs stripe"
step "64 chunks of 64 KiB, each synced"
/bin/volume_check write "$S" 64 > /tmp/stripe.out || { cat /tmp/stripe.out; fail "stripe writer"; }
tail -n1 /tmp/stripe.out
step "read back by another process; fsck"
/bin/volume_check verify "$S" 63 || fail "stripe verify"
/bin/pollfs fsck "$S" || fail "fsck stripe"

M="mirror:(vfio:$A,vfio:$B)"
step "mkfs on $M"
/bin/pollfs mkfs --force "$M" || fail "mkfs mirror"
mirror status "$M"
both_in_sync "a new mirror with a leg out of sync"

step "a syncing writer; leg 1's controller loses bus mastering"
/bin/volume_check write "$M" 0 > /tmp/synced 2>/tmp/writer.err &
w=$!
wait_synced 24 1200
echo "$(synced) chunks synced with both legs"
cmd=$(command_byte "$B")
set_command_byte "$B" $((cmd & ~4)) || fail "PCI command write"
echo "$B: PCI command byte $cmd -> $(command_byte "$B")"
wait_leg_failed 1 1800
wait_synced $((at + 24)) 1200
kill_writer

step "the headers say leg 1 failed (its controller is reopened with bus mastering on)"
mirror status "$M"
grep -q '^leg 1 .*: failed' /tmp/status || fail "leg 1 not recorded failed"
grep -q '^leg 0 .*: in sync$' /tmp/status || fail "leg 0 not in sync"

step "every synced chunk, read back"
/bin/volume_check verify "$M" "$last" || fail "synced data after the kill"

step "rejoin leg 1 (waits for the resync)"
/bin/pollfs mirror rejoin "$M" 1 || fail "rejoin 1"
mirror status "$M"
both_in_sync "a leg out of sync after the rejoin"

step "leg 0 dropped: every synced chunk, read from leg 1"
mirror fail "$M" 0
mirror status "$M"
grep -q '^leg 0 .*: failed' /tmp/status || fail "leg 0 not recorded failed"
/bin/volume_check verify "$M" "$last" || fail "synced data on leg 1"

step "rejoin leg 0; fsck"
/bin/pollfs mirror rejoin "$M" 0 || fail "rejoin 0"
mirror status "$M"
both_in_sync "a leg out of sync after the second rejoin"
grep -q 'clean$' /tmp/status || fail "the mirror is not clean"
/bin/pollfs fsck "$M" || fail "fsck mirror"

passed
INIT

MIB=128
img0="$cache/nvme-vfio-leg0.img"
img1="$cache/nvme-vfio-leg1.img"
out="$cache/console-vfio-volume.log"
rm -f "$img0" "$img1"
truncate -s ${MIB}M "$img0"
truncate -s ${MIB}M "$img1"
qemu_extra=(
    -drive "file=$img1,if=none,id=leg1,format=raw"
    -device nvme,serial=leg1,drive=leg1
)
log "booting (console: $out)"
boot "$cache/vfio-volume-initrd.gz" "$img0" "$out" "" "no_timer_check"
verdict "$out" VM-VFIO-VOLUME-OK "vfio volume test"
data=$(( (MIB << 20) - 8192 ))
cmp -n $data "$img0" "$img1" || die "the mirror's legs differ over its data"
log "the two backing images hold the same $data bytes of mirror data"
rm -f "$img0" "$img1"
log "all passed in $((SECONDS - started)) s"
