#!/bin/bash
# NVMe/TCP in one VM run against one target, the Linux kernel's nvmet-tcp
# on 127.0.0.1:4420 exporting QEMU's NVMe namespace (vm/nvmet.sh):
# 4 KiB random reads at queue depth 1 and 32 with
#   - fio on the guest kernel's own NVMe/TCP initiator (nvme-tcp), io_uring
#     (--iodepth) and psync (QD32 is 32 jobs of one read each),
#   - `pollfs perf nvme-tcp://127.0.0.1:4420/testnqn`.
# The kernel runs before and after pollfs (the host is shared: drift shows
# as a difference between them); the kernel's controller is disconnected
# while pollfs runs. Under TCG absolute numbers are noise; the ratios are
# the result.
#
# Usage: bash vm/tcp-bench.sh   (POLLFS_BENCH_SECONDS per run, default 5)
source "$(dirname "$0")/lib.sh"

seconds="${POLLFS_BENCH_SECONDS:-5}"
ensure_packages fio
ensure_kernel
build_static --bin pollfs

modules="nvme configfs nvmet nvmet-tcp nvme-fabrics nvme-tcp crc32c_generic"
extra="$bin_dir/pollfs:bin/pollfs $vm_dir/guest-common.sh:guest-common.sh $vm_dir/nvmet.sh:nvmet.sh"
extra="$extra $(with_libraries "$(command -v fio)" | tr '\n' ' ')"
# Uncompressed: gunzip of fio's libraries is slow under TCG.
init_vars="secs=$seconds" compress=cat make_initramfs "$cache/tcp-bench-initrd.cpio" <<'INIT'
#!/bin/busybox sh
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
. /guest-common.sh
. /nvmet.sh
run_fio() { # name qd device extra-args
    out="$(fio --name=bench --filename="$3" --direct=1 --rw=randread --bs=4k \
        --runtime="$secs" --time_based --norandommap --randrepeat=0 \
        --group_reporting --minimal $4 2>&1)"
    iops="$(echo "$out" | awk -F';' 'NF > 8 {print $8; exit}')"
    [ -n "$iops" ] || { echo "fio $1 qd$2 failed: $out"; iops=FAILED; }
    echo "RESULT $1 $2 $iops"
}
kernel_runs() {
    dev="$(kernel_connect)" || { echo "kernel initiator did not connect"; return; }
    ctrl="$(ls -d /sys/class/nvme-fabrics/ctl/nvme* 2>/dev/null | head -n1)"
    echo "kernel initiator: $dev ($(cat /sys/block/$(basename "$dev")/device/model 2>/dev/null))"
    run_fio io_uring 1 "$dev" "--ioengine=io_uring --iodepth=1"
    run_fio io_uring 32 "$dev" "--ioengine=io_uring --iodepth=32"
    run_fio psync 1 "$dev" "--ioengine=psync"
    run_fio psync 32 "$dev" "--ioengine=psync --numjobs=32"
    for c in /sys/class/nvme/nvme*; do
        [ "$(cat "$c/transport" 2>/dev/null)" = tcp ] && echo 1 > "$c/delete_controller"
    done
}
if nvmet_up; then
    kernel_runs
    for qd in 1 32; do
        iops="$(/bin/pollfs perf "$TCP_URL" --workload randread --qd "$qd" --seconds "$secs" | awk '/^IOPS:/{print $2}')"
        echo "RESULT pollfs $qd ${iops:-FAILED}"
    done
    kernel_runs
else
    echo "nvmet setup failed"
fi
echo "VM-BENCH-DONE"
poweroff -f
INIT

img="$cache/nvme-tcp-bench.img"
rm -f "$img"
truncate -s 1G "$img"
out="$cache/console-tcp-bench.log"
log "booting the NVMe/TCP bench VM ($seconds s per run; console: $out)"
# no_timer_check: under TCG on a busy host the IO-APIC timer check can
# fail and panic the guest at boot.
boot "$cache/tcp-bench-initrd.cpio" "$img" "$out" "" "no_timer_check"
finished "$out" VM-BENCH-DONE
iops_table "$out" "4 KiB randread, TCP" "pollfs io_uring psync"
