#!/bin/bash
# The driver against a real NVMe controller: QEMU's, inside a throwaway VM
# with an emulated IOMMU, through VFIO (see vm/lib.sh). For 512- and
# 4096-byte blocks it boots the guest, runs the device test
# (driver/examples/vm_check) and the `pollfs` tools there, and then checks
# on the host that the data the guest wrote is in the backing image.
#
# Exit status 0 only when every step passed. Usage: bash vm/test.sh
source "$(dirname "$0")/lib.sh"

started=$SECONDS
ensure_packages
ensure_kernel
build_static --example vm_check --bin pollfs
check_bin="$bin_dir/examples/vm_check"
cli_bin="$bin_dir/pollfs"

# The kernel's nvme driver claims the controller at boot; `pollfs setup`
# takes it over for vfio-pci and `pollfs setup --reset` gives it back, so
# both directions run against a real sysfs.
modules="nvme vfio_iommu_type1 vfio-pci"
extra="$check_bin:bin/vm_check $cli_bin:bin/pollfs $vm_dir/guest-common.sh:guest-common.sh"
make_initramfs "$cache/test-initrd.gz" <<'INIT'
#!/bin/busybox sh
. /guest-common.sh
addr="$(nvme_addr)"
driver() { basename "$(readlink "/sys/bus/pci/devices/$addr/driver")"; }
echo "nvme controller at $addr, bound to $(driver)"
rc=1
if /bin/pollfs setup "$addr" --hugepages 16 && [ "$(driver)" = vfio-pci ]; then
    # perf first: its writes land anywhere, and vm_check leaves the
    # pattern the host checks.
    /bin/pollfs identify "vfio:$addr" && \
    /bin/pollfs perf "vfio:$addr" -w randread -q 8 -t 1 && \
    /bin/pollfs perf -r "trtype:PCIe traddr:$addr" -w randrw -M 70 -q 4 -c 0x3 -o 64k -t 1 && \
    /bin/vm_check "$addr" && \
    /bin/pollfs setup --reset "$addr" && [ "$(driver)" = nvme ] && \
    rc=0 || rc=$?
else
    echo "pollfs setup did not hand $addr to vfio-pci"
fi
echo "VM-RESULT rc=$rc"
poweroff -f
INIT

# MDTS 10 (4 MiB): one command of 1024 pages needs two chained PRP list
# pages, and the 8 MiB requests are split.
for bs in ${POLLFS_VM_BLOCK_SIZES:-512 4096}; do
    img="$cache/nvme-$bs.img"
    out="$cache/console-$bs.log"
    rm -f "$img"
    truncate -s 256M "$img"
    log "booting with $bs-byte blocks (console: $out)"
    t0=$SECONDS
    boot "$cache/test-initrd.gz" "$img" "$out" \
        ",mdts=10,logical_block_size=$bs,physical_block_size=$bs"
    show_console "$out"
    grep -q "VM-CHECK-OK" "$out" || die "device test failed with $bs-byte blocks"
    grep -q "VM-RESULT rc=0" "$out" || die "guest tools failed with $bs-byte blocks"
    "$check_bin" verify-image "$img" || die "backing image check failed ($bs-byte blocks)"
    log "$bs-byte blocks passed in $((SECONDS - t0)) s"
done
log "all passed in $((SECONDS - started)) s"
