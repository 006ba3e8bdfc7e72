#!/bin/bash
# The stripe's gain over real controllers, in one VM boot: `pollfs bench`
# (direct I/O through the filesystem, so every byte reaches the device)
# on one device and on a stripe of two of the same kind:
#   - vfio: QEMU NVMe controller A alone, then stripe:(vfio:A,vfio:B), both
#     controllers in one VFIO container;
#   - tcp: the guest kernel's nvmet-tcp exporting QEMU controller T0 alone
#     (127.0.0.1:4420), then a stripe of it and T1 (127.0.0.1:4421).
# Four jobs each, QD 32: sequential write and read (128 KiB), random
# write and read (4 KiB). Every job runs between two marker reads on a
# fifth controller; QEMU's trace events, counted by vm/trace-count.awk
# (the counter vm/peers.sh uses), give each job's device commands and the
# requests each leg's drive received (legs are named by a read the guest
# makes on each before the runs). Prints the table and the ratios stripe /
# one within each kind. Rounds alternate the order (one then stripe, then
# stripe then one), so drift from the shared host falls on both. Under TCG
# absolute numbers are noise; the ratios are the result.
#
# Usage: bash vm/stripe-bench.sh   (POLLFS_BENCH_SECONDS per job, default
# 5; POLLFS_BENCH_ROUNDS, default 2)
source "$(dirname "$0")/lib.sh"

seconds="${POLLFS_BENCH_SECONDS:-5}"
rounds="${POLLFS_BENCH_ROUNDS:-2}"
ensure_packages
ensure_kernel
build_static --bin pollfs

modules="nvme configfs nvmet nvmet-tcp crc32c_generic vfio_iommu_type1 vfio-pci"
extra="$bin_dir/pollfs:bin/pollfs $vm_dir/guest-common.sh:guest-common.sh $vm_dir/nvmet.sh:nvmet.sh"
init_vars="secs=$seconds rounds=$rounds" compress=cat make_initramfs "$cache/stripe-bench-initrd.cpio" <<'INIT'
#!/bin/busybox sh
. /guest-common.sh
. /nvmet.sh
fail() { echo "STRIPE-BENCH-FAILED: $*"; poweroff -f; exit 1; }
# The namespace of the controller whose serial is $1.
disk_of() {
    for b in /sys/block/nvme*n1; do
        [ "$(cat "$b/device/serial" 2>/dev/null | tr -d ' ')" = "$1" ] && { echo "/dev/$(basename "$b")"; return; }
    done
}
i=0
while [ $i -lt 200 ]; do
    ok=1
    for s in deadbeef leg1 tcp0 tcp1 marker; do [ -b "$(disk_of $s)" ] || ok=0; done
    [ $ok = 1 ] && break
    sleep 0.1
    i=$((i + 1))
done
[ $ok = 1 ] || fail "the kernel's nvme driver did not show all five namespaces"
A=$(nvme_by_serial deadbeef); B=$(nvme_by_serial leg1)
mark_dev=$(disk_of marker)
cat > /bin/mark <<MARK
#!/bin/sh
exec dd if=$mark_dev of=/dev/null bs=4096 count=1 skip=\$((524288 + \$1 * 256)) iflag=direct 2>/dev/null
MARK
chmod +x /bin/mark
# Name each leg's drive for the trace: a read at 960 MiB + k MiB.
k=0
for s in deadbeef leg1 tcp0 tcp1; do
    dd if="$(disk_of $s)" of=/dev/null bs=4096 count=1 skip=$(( (960 + k) * 256 )) iflag=direct 2>/dev/null \
        || fail "naming read on $s"
    case $s in deadbeef) n=A ;; leg1) n=B ;; tcp0) n=T0 ;; tcp1) n=T1 ;; esac
    echo "LEGID $k $n"
    k=$((k + 1))
done
nvmet_base || fail "loopback and configfs"
nvmet_target tcp0 1 4420 "$(disk_of tcp0)" || fail "target tcp0"
nvmet_target tcp1 2 4421 "$(disk_of tcp1)" || fail "target tcp1"
bind_vfio "$A" || fail "bind $A"
bind_vfio "$B" || fail "bind $B"
T0=nvme-tcp://127.0.0.1:4420/tcp0
T1=nvme-tcp://127.0.0.1:4421/tcp1
echo "vfio: A $A, B $B; tcp: $T0, $T1; markers on $mark_dev"

w=0
# runs KIND LAYOUT DEVICE ROUND: the four jobs on DEVICE, each between
# markers.
runs() {
    cat > /tmp/jobs.fio <<JOBS
[global]
stonewall
direct=1
size=128m
cache=16m
iodepth=32
runtime=$secs
[seqwrite]
rw=write
bs=128k
exec_prerun=/bin/mark $((2 * w))
exec_postrun=/bin/mark $((2 * w + 1))
[seqread]
rw=read
bs=128k
exec_prerun=/bin/mark $((2 * w + 2))
exec_postrun=/bin/mark $((2 * w + 3))
[randwrite]
rw=randwrite
bs=4k
exec_prerun=/bin/mark $((2 * w + 4))
exec_postrun=/bin/mark $((2 * w + 5))
[randread]
rw=randread
bs=4k
exec_prerun=/bin/mark $((2 * w + 6))
exec_postrun=/bin/mark $((2 * w + 7))
JOBS
    echo "== $1 $2: pollfs bench --device $3"
    /bin/pollfs bench --device "$3" --force /tmp/jobs.fio > /tmp/bench.out 2>&1 \
        || { cat /tmp/bench.out; fail "pollfs bench on $3"; }
    grep -v '^$' /tmp/bench.out
    for job in seqwrite seqread randwrite randread; do
        mibs=$(awk -v job="$job" '$1 == job && /groupid/ { j = 1; next }
            j && $1 == "pollfs" { print $3; exit }' /tmp/bench.out)
        echo "WINDOW $w $1 $2 $job ${mibs:-FAILED} $4"
        w=$((w + 1))
    done
}
r=1
while [ $r -le $rounds ]; do
    order="one stripe"
    [ $((r % 2)) = 0 ] && order="stripe one"
    for l in $order; do
        case $l in
            one) runs vfio one "vfio:$A" $r ;;
            stripe) runs vfio stripe "stripe:(vfio:$A,vfio:$B)" $r ;;
        esac
    done
    for l in $order; do
        case $l in
            one) runs tcp one "$T0" $r ;;
            stripe) runs tcp stripe "stripe:($T0,$T1)" $r ;;
        esac
    done
    r=$((r + 1))
done
echo "STRIPE-BENCH-DONE"
poweroff -f
INIT

imgs=()
for n in leg1 tcp0 tcp1; do
    imgs+=("$cache/nvme-stripe-$n.img")
done
img="$cache/nvme-stripe-deadbeef.img"
marks="$cache/nvme-stripe-marker.img"
trace="$cache/stripe-trace.log"
rm -f "$img" "$marks" "$trace" "${imgs[@]}"
truncate -s 1G "$img" "${imgs[@]}"
truncate -s 4G "$marks"
qemu_extra=(
    -drive "file=${imgs[0]},if=none,id=leg1,format=raw" -device nvme,serial=leg1,drive=leg1
    -drive "file=${imgs[1]},if=none,id=tcp0,format=raw" -device nvme,serial=tcp0,drive=tcp0
    -drive "file=${imgs[2]},if=none,id=tcp1,format=raw" -device nvme,serial=tcp1,drive=tcp1
    -drive "file=$marks,if=none,id=mark,format=raw" -device nvme,serial=marker,drive=mark
    -trace pci_nvme_io_cmd -trace pci_nvme_read -trace pci_nvme_write
    -trace blk_co_preadv -trace blk_co_pwritev
    -D "$trace" -msg timestamp=on
)
out="$cache/console-stripe-bench.log"
log "booting the stripe bench VM ($rounds rounds, $seconds s per job; console: $out, trace: $trace)"
boot "$cache/stripe-bench-initrd.cpio" "$img" "$out" "" "no_timer_check"
finished "$out" STRIPE-BENCH-DONE
[ -s "$trace" ] || die "QEMU wrote no trace ($trace)"
grep -E '^(WINDOW|LEGID) ' "$out" | tr -d '\r' > "$cache/stripe-windows.txt"
awk -f "$vm_dir/trace-count.awk" -f "$vm_dir/stripe-count.awk" "$cache/stripe-windows.txt" "$trace"
rm -f "$img" "$marks" "${imgs[@]}" "$trace"
