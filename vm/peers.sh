#!/bin/bash
# Device commands per sync, pollfs against ext4, xfs and btrfs, in one VM
# boot on one QEMU NVMe namespace, counted by QEMU itself (its trace events
# are the referee: nothing either side reports about itself is counted).
# Three workloads, 4 KiB writes, 2,000 syncs each: an overwrite inside EOF
# with fdatasync, appends with fdatasync, appends with fsync; fio (psync)
# on each filesystem of the guest kernel, then `pollfs bench` through VFIO
# (vm/peers-guest.sh). Each workload runs between two marker reads on a
# second controller; the host counts the test namespace's writes, flushes
# and reads between them.
#
# Usage: bash vm/peers.sh
source "$(dirname "$0")/lib.sh"

ensure_packages fio mkfs.ext4:e2fsprogs mkfs.xfs:xfsprogs mkfs.btrfs:btrfs-progs
ensure_kernel
build_static --bin pollfs

# crc32c first: libcrc32c and ext4 look the algorithm up when they load,
# and busybox insmod does not follow their soft dependency on it.
modules="crc32c_generic nvme ext4 xfs btrfs vfio_iommu_type1 vfio-pci"
libs=""
for prog in fio /usr/sbin/mkfs.ext4 /usr/sbin/mkfs.xfs /usr/sbin/mkfs.btrfs; do
    libs="$libs $(with_libraries "$(command -v "$prog")" | tr '\n' ' ')"
done
extra="$bin_dir/pollfs:bin/pollfs $vm_dir/guest-common.sh:guest-common.sh"
extra="$extra $vm_dir/peers-guest.sh:peers-guest.sh /etc/mke2fs.conf:etc/mke2fs.conf $libs"
# Uncompressed: gunzip of fio's libraries is slow under TCG.
compress=cat make_initramfs "$cache/peers-initrd.cpio" <<'INIT'
#!/bin/busybox sh
export PATH=/bin:/usr/bin:/usr/sbin
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
. /guest-common.sh
. /peers-guest.sh
INIT

img="$cache/nvme-peers.img"
marks="$cache/nvme-peers-marker.img"
trace="$cache/peers-trace.log"
rm -f "$img" "$marks" "$trace"
truncate -s 1G "$img"
truncate -s 4G "$marks"
qemu_extra=(
    -drive "file=$marks,if=none,id=mark,format=raw"
    -device nvme,serial=marker,drive=mark
    -trace pci_nvme_io_cmd -trace pci_nvme_read -trace pci_nvme_write
    -trace blk_co_pwritev
    -D "$trace" -msg timestamp=on
)
out="$cache/console-peers.log"
log "booting the peers VM (console: $out, trace: $trace)"
boot "$cache/peers-initrd.cpio" "$img" "$out" "" ""
finished "$out" PEERS-DONE
[ -s "$trace" ] || die "QEMU wrote no trace ($trace)"

grep '^WINDOW ' "$out" | tr -d '\r' > "$cache/peers-windows.txt"
[ "$(wc -l < "$cache/peers-windows.txt")" -eq 12 ] || die "expected 12 workload windows"
awk -f "$vm_dir/trace-count.awk" -f "$vm_dir/peers-count.awk" "$cache/peers-windows.txt" "$trace"
