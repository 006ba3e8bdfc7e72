#!/bin/bash
# pollfs against the guest kernel's NVMe driver on the same emulated
# namespace, in one VM run: 4 KiB random reads at queue depth 1 and 32 with
#   - fio, io_uring, interrupts (the kernel's normal path),
#   - fio, io_uring with --hipri on polled queues (nvme poll_queues=N),
#   - `pollfs perf` through VFIO (after the controller is moved to vfio-pci).
# Under TCG absolute numbers are noise; the ratios are the result.
#
# Usage: bash vm/bench.sh   (POLLFS_BENCH_SECONDS per run, default 5)
source "$(dirname "$0")/lib.sh"

seconds="${POLLFS_BENCH_SECONDS:-5}"
poll_queues="${POLLFS_BENCH_POLL_QUEUES:-2}"
ensure_packages fio
ensure_kernel
build_static --bin pollfs

modules="nvme vfio_iommu_type1 vfio-pci"
module_args[nvme]="poll_queues=$poll_queues"
extra="$bin_dir/pollfs:bin/pollfs $vm_dir/guest-common.sh:guest-common.sh $(with_libraries "$(command -v fio)" | tr '\n' ' ')"
# Uncompressed: gunzip of fio's libraries is slow under TCG.
init_vars="secs=$seconds" compress=cat make_initramfs "$cache/bench-initrd.cpio" <<'INIT'
#!/bin/busybox sh
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
. /guest-common.sh
addr="$(nvme_addr)"
run_fio() { # name qd extra-args
    out="$(fio --name=bench --filename=/dev/nvme0n1 --direct=1 --ioengine=io_uring \
        --rw=randread --bs=4k --iodepth="$2" --runtime="$secs" --time_based \
        --norandommap --randrepeat=0 --minimal $3 2>&1)"
    iops="$(echo "$out" | awk -F';' 'NF > 8 {print $8}')"
    [ -n "$iops" ] || { echo "fio $1 qd$2 failed: $out"; iops=FAILED; }
    echo "RESULT $1 $2 $iops"
}
kernel_runs() {
    i=0
    while [ ! -b /dev/nvme0n1 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    if [ -b /dev/nvme0n1 ]; then
        echo "poll queues: $(cat /sys/module/nvme/parameters/poll_queues), io_poll: $(cat /sys/block/nvme0n1/queue/io_poll)"
        for qd in 1 32; do
            run_fio io_uring "$qd" ""
            run_fio io_uring_hipri "$qd" "--hipri"
        done
    else
        echo "no /dev/nvme0n1 from the kernel driver"
    fi
}
# Kernel, pollfs, kernel again: drift during the run (the host is shared)
# shows up as a difference between the two kernel rounds.
kernel_runs
if bind_vfio "$addr"; then
    for qd in 1 32; do
        iops="$(/bin/pollfs perf "vfio:$addr" -w randread -q "$qd" -t "$secs" | awk '/^Total/{print $3}')"
        echo "RESULT pollfs $qd ${iops:-FAILED}"
    done
else
    echo "could not bind $addr to vfio-pci"
fi
d=/sys/bus/pci/devices/$addr
echo "$addr" > "$d/driver/unbind"
echo > "$d/driver_override"
echo "$addr" > /sys/bus/pci/drivers_probe
kernel_runs
echo "VM-BENCH-DONE"
poweroff -f
INIT

img="$cache/nvme-bench.img"
rm -f "$img"
truncate -s 1G "$img"
out="$cache/console-bench.log"
log "booting the bench VM ($seconds s per run; console: $out)"
boot "$cache/bench-initrd.cpio" "$img" "$out" "" "nvme.poll_queues=$poll_queues"
finished "$out" VM-BENCH-DONE
iops_table "$out" "4 KiB randread" "pollfs io_uring io_uring_hipri"
