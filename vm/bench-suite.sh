#!/bin/bash
# `pollfs bench` inside the VM, on QEMU's NVMe controller through VFIO: the
# whole stack (engine, log, driver, VFIO) against the guest kernel's page
# cache (tmpfs) doing the same jobs, in one VM run. Under TCG absolute
# numbers are noise; read the ratios.
#
# Usage: bash vm/bench-suite.sh   (POLLFS_VM_PRESET, default quick)
source "$(dirname "$0")/lib.sh"

preset="${POLLFS_VM_PRESET:-quick}"
ensure_kernel
build_static --bin pollfs

modules="nvme vfio_iommu_type1 vfio-pci"
extra="$bin_dir/pollfs:bin/pollfs $vm_dir/guest-common.sh:guest-common.sh"
init_vars="preset=$preset" compress=cat make_initramfs "$cache/suite-initrd.cpio" <<'INIT'
#!/bin/busybox sh
. /guest-common.sh
addr="$(nvme_addr)"
mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm
if bind_vfio "$addr"; then
    # The image is blank, so the signature check passes without --force.
    /bin/pollfs bench --device "vfio:$addr" --preset "$preset" --compare && echo "VM-SUITE-OK"
else
    echo "could not bind $addr to vfio-pci"
fi
echo "VM-SUITE-DONE"
poweroff -f
INIT

img="$cache/nvme-suite.img"
rm -f "$img"
truncate -s 1G "$img"
out="$cache/console-suite.log"
log "booting the bench-suite VM (preset $preset; console: $out)"
boot "$cache/suite-initrd.cpio" "$img" "$out" "" ""
# The guest's lines are the result: on stdout.
show_console "$out" 2>&1
grep -q "VM-SUITE-OK" "$out" || die "the bench suite did not complete in the VM"
