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
build_static -p pollfs-cli --bin pollfs

modules="nvme vfio_iommu_type1 vfio-pci"
module_args[nvme]="poll_queues=$poll_queues"
extra="$bin_dir/pollfs:bin/pollfs $vm_dir/guest-common.sh:guest-common.sh $(with_libraries "$(command -v fio)" | tr '\n' ' ')"
compress=cat make_initramfs "$cache/bench-initrd.cpio" <<INIT
#!/bin/busybox sh
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
. /guest-common.sh
secs=$seconds
INIT
# The rest of the init script does not expand host variables.
cat >> "$cache/initramfs/init" <<'INIT'
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
(cd "$cache/initramfs" && find . | cpio -o -H newc 2>/dev/null) > "$cache/bench-initrd.cpio"

img="$cache/nvme-bench.img"
rm -f "$img"
truncate -s 1G "$img"
out="$cache/console-bench.log"
log "booting the bench VM ($seconds s per run; console: $out)"
boot "$cache/bench-initrd.cpio" "$img" "$out" "" "nvme.poll_queues=$poll_queues"
grep -v '^\[' "$out" | grep -v '^$' | sed 's/^/    /' >&2 || true
grep -q "VM-BENCH-DONE" "$out" || die "bench did not finish"
for name in pollfs io_uring io_uring_hipri; do
    for qd in 1 32; do
        want=2
        [ $name = pollfs ] && want=1
        [ "$(grep -Ec "^RESULT $name $qd [0-9]" "$out")" -eq $want ] || die "missing results for $name at QD$qd"
    done
done
awk '/^RESULT/ {k = $2 " " $3; sum[k] += $4; n[k]++; runs[k] = runs[k] " " $4}
END {
    for (k in sum) iops[k] = sum[k] / n[k]
    printf "%-22s %12s %12s   %s\n", "4 KiB randread", "QD1 IOPS", "QD32 IOPS", "(each run, QD1 then QD32)"
    m = split("pollfs io_uring io_uring_hipri", names, " ")
    for (i = 1; i <= m; i++)
        printf "%-22s %12d %12d   %s /%s\n", names[i], iops[names[i] " 1"], iops[names[i] " 32"], runs[names[i] " 1"], runs[names[i] " 32"]
    for (i = 2; i <= m; i++)
        printf "pollfs/%-15s %11.2fx %11.2fx\n", names[i], iops["pollfs 1"] / iops[names[i] " 1"], iops["pollfs 32"] / iops[names[i] " 32"]
}' "$out"
