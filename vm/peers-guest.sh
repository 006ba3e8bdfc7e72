# The guest's part of vm/peers.sh (sourced by /init, busybox sh): ext4, xfs
# and btrfs in turn on the test namespace, each running the three sync
# workloads with fio, then the same workloads with `pollfs bench` through
# VFIO. Every workload runs between two markers (exec_prerun and
# exec_postrun, in fio and in the bench alike): a 4 KiB direct read of the
# marker controller's namespace at 2 GiB + k MiB, which QEMU's trace shows
# as `pci_nvme_read ... lba 0x400000 + k * 0x800`, an address the 1 GiB test
# namespace does not have. The host counts the test namespace's commands
# between marker 2w and 2w + 1 (window w).
#
# Prints `WINDOW w engine workload syncs` per workload and PEERS-DONE.

# The namespace block device of $1 sectors.
disk_of_size() {
    for b in /sys/block/nvme*n1; do
        [ "$(cat "$b/size")" = "$1" ] && { echo "/dev/$(basename "$b")"; return; }
    done
}

fail() { echo "PEERS-FAILED: $*"; poweroff -f; }

i=0
while [ $i -lt 100 ]; do
    test_addr="$(nvme_by_serial deadbeef)"
    mark_addr="$(nvme_by_serial marker)"
    test_dev="$(disk_of_size 2097152)"
    mark_dev="$(disk_of_size 8388608)"
    [ -n "$test_addr" ] && [ -n "$mark_addr" ] && [ -b "$test_dev" ] && [ -b "$mark_dev" ] && break
    sleep 0.1
    i=$((i + 1))
done
[ -b "$test_dev" ] && [ -b "$mark_dev" ] || fail "the kernel's nvme driver did not show both namespaces"
echo "test namespace $test_dev (controller $test_addr), markers on $mark_dev (controller $mark_addr)"
echo "volatile write cache: $(cat /sys/block/${test_dev#/dev/}/queue/write_cache), fua: $(cat /sys/block/${test_dev#/dev/}/queue/fua)"

cat > /bin/mark <<MARK
#!/bin/sh
exec dd if=$mark_dev of=/dev/null bs=4096 count=1 skip=\$((524288 + \$1 * 256)) iflag=direct 2>/dev/null
MARK
chmod +x /bin/mark

# The `total_ios` of the first "sync" object after the line matching $2 in
# the bench's JSON report $1.
syncs_in() {
    awk -v job="$2" 'index($0, job) { j = 1 } j && /"sync" :|"sync":/ { s = 1 }
        s && /"total_ios"/ { gsub(/[^0-9]/, ""); print; exit }' "$1"
}

blocks=2001 # fio's last write has no sync after it: 2,000 syncs
w=0
mkdir -p /mnt
cd /tmp
for fs in ext4 xfs btrfs; do
    case $fs in
        # Inode tables and journal zeroed now, not by a kernel thread
        # during the windows.
        ext4) /usr/sbin/mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$test_dev" ;;
        xfs) /usr/sbin/mkfs.xfs -q -f "$test_dev" ;;
        btrfs) /usr/sbin/mkfs.btrfs -q -f "$test_dev" >/dev/null ;;
    esac || fail "mkfs.$fs"
    mount -t $fs "$test_dev" /mnt || fail "mount $fs"
    for wl in overwrite-fdatasync append-fdatasync append-fsync; do
        f=/mnt/$wl
        case $wl in
            overwrite-*)
                dd if=/dev/zero of=$f bs=4096 count=$blocks conv=fsync 2>/dev/null || fail "fill $fs"
                args="--overwrite=1" ;;
            *)
                : > $f
                args="--file_append=1" ;;
        esac
        case $wl in
            *-fsync) args="$args --fsync=1" ;;
            *) args="$args --fdatasync=1" ;;
        esac
        sync
        fio --name=$wl --filename=$f --ioengine=psync --rw=write --bs=4k \
            --size=$((blocks * 4))k --fallocate=none $args \
            --exec_prerun="/bin/mark $((2 * w))" --exec_postrun="/bin/mark $((2 * w + 1))" \
            --write_iolog=/tmp/fio-$w.iolog --output=/tmp/fio-$w.out >/dev/null 2>&1 \
            || { cat /tmp/fio-$w.out; fail "fio $fs $wl"; }
        # fio's JSON leaves its sync count at 0 for psync: count the syncs
        # its I/O log recorded.
        echo "WINDOW $w $fs $wl $(grep -cE ' (sync|datasync) ' /tmp/fio-$w.iolog)"
        w=$((w + 1))
    done
    umount /mnt || fail "umount $fs"
done

# pollfs: the same three workloads, one job each, with the bench's fill
# (the overwrite job's file written and synced) before the first marker.
cat > /tmp/peers.fio <<JOBS
[global]
rw=write
bs=4k
size=$((blocks * 4))k
number_ios=2000
runtime=10m
stonewall
[overwrite-fdatasync]
fdatasync=1
exec_prerun=/bin/mark $((2 * w))
exec_postrun=/bin/mark $((2 * w + 1))
[append-fdatasync]
append=1
fdatasync=1
exec_prerun=/bin/mark $((2 * w + 2))
exec_postrun=/bin/mark $((2 * w + 3))
[append-fsync]
append=1
fsync=1
exec_prerun=/bin/mark $((2 * w + 4))
exec_postrun=/bin/mark $((2 * w + 5))
JOBS
bind_vfio "$test_addr" || fail "could not bind $test_addr to vfio-pci"
# --force: the namespace holds the btrfs made above.
/bin/pollfs bench --device "vfio:$test_addr" --force --output-format normal,json /tmp/peers.fio \
    > /tmp/pollfs.out 2> /tmp/pollfs.err || { cat /tmp/pollfs.out /tmp/pollfs.err; fail "pollfs bench"; }
cat /tmp/pollfs.err
awk '/^\{/ { exit } { print }' /tmp/pollfs.out
awk 'j || /^\{/ { j = 1; print }' /tmp/pollfs.out > /tmp/pollfs.json
for wl in overwrite-fdatasync append-fdatasync append-fsync; do
    echo "WINDOW $w pollfs $wl $(syncs_in /tmp/pollfs.json "\"$wl\"")"
    w=$((w + 1))
done
echo "PEERS-DONE"
poweroff -f
