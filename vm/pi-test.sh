#!/bin/bash
# End-to-end protection information on a real controller: QEMU's NVMe
# namespace formatted with 4096-byte blocks and 8 bytes of type 1 PI
# (`ms=8,pi=1`), driven through VFIO (see vm/lib.sh). Three boots:
#
# 1. The device test (driver/examples/vm_check) runs whole on the PI
#    namespace, every Read, Write and Write Zeroes carrying PRACT and
#    PRCHK; QEMU's trace events are the referee: every read and write it
#    executed went through its PI path (pci_nvme_dif_rw) with PRINFO 0xd
#    (PRACT, guard and reference tag checks). The host then finds the
#    pattern in the image and, beside each block of it, the PI the
#    controller generated (`vm_check pi-image`), and damages the image: a
#    bit of one block flipped, another block overwritten with a third's
#    data and PI (`vm_check pi-corrupt`).
# 2. The driver reads them back (`vm_check pi-detect`): the guard check
#    error and the reference tag check error, named and counted, and a
#    block beside them right; QEMU's trace shows the two failed checks.
# 3. The engine on a fresh PI namespace: `pollfs bench` (1000 random
#    writes synced every 8, 1000 cached reads, 1000 direct reads),
#    `pollfs fsck` of the filesystem the bench left, `pollfs mkfs` and
#    `fsck` again. The host greps each step's exit status and its output
#    (the bench's sync and device-read counts, mkfs's free blocks,
#    fsck's "0 problems"); QEMU's trace shows every read and write
#    carried PRACT and PRCHK, as in boot 1.
#
# Exit status 0 only when every step passed. Usage: bash vm/pi-test.sh
source "$(dirname "$0")/lib.sh"

started=$SECONDS
ensure_packages
ensure_kernel
build_static --example vm_check --bin pollfs
check_bin="$bin_dir/examples/vm_check"

modules="vfio_iommu_type1 vfio-pci"
extra="$check_bin:bin/vm_check $bin_dir/pollfs:bin/pollfs $vm_dir/guest-common.sh:guest-common.sh"
for mode in test detect engine; do
    init_vars="MODE=$mode" make_initramfs "$cache/pi-$mode-initrd.gz" <<'INIT'
#!/bin/busybox sh
. /guest-common.sh
addr="$(nvme_addr)"
rc=1
if bind_vfio "$addr"; then
    echo "nvme controller at $addr, on vfio-pci"
    case "$MODE" in
    test) /bin/vm_check "$addr" && rc=0 || rc=$? ;;
    detect) /bin/vm_check pi-detect "$addr" && rc=0 || rc=$? ;;
    engine)
        # runtime=10m: each job ends at number_ios, not at the clock,
        # however slow TCG is. Every job reads or writes its own file.
        cat > /tmp/pi.fio <<'JOBS'
[global]
bs=4k
size=8m
number_ios=1000
runtime=10m
[synced-randwrite]
rw=randwrite
fsync=8
[cached-randread]
rw=randread
stonewall
[direct-randread]
rw=randread
direct=1
stonewall
JOBS
        # Runs "$@" as step $1, shows its output and says how it ended;
        # the host greps each step's line.
        step() {
            name="$1"
            shift
            echo "== $name: $*"
            if "$@" > "/tmp/$name.out" 2>&1; then
                cat "/tmp/$name.out"
                echo "ENGINE-STEP $name ok"
            else
                r=$?
                cat "/tmp/$name.out"
                echo "ENGINE-STEP $name FAILED (exit $r)"
                return 1
            fi
        }
        step bench /bin/pollfs bench --device "vfio:$addr" /tmp/pi.fio && \
        step fsck-after-bench /bin/pollfs fsck "vfio:$addr" && \
        step mkfs /bin/pollfs mkfs --force "vfio:$addr" && \
        step fsck-after-mkfs /bin/pollfs fsck "vfio:$addr" && \
        echo "VM-ENGINE-OK" && rc=0 || rc=$?
        ;;
    esac
else
    echo "could not bind $addr to vfio-pci"
fi
echo "VM-RESULT rc=$rc"
poweroff -f
INIT
done

img="$cache/nvme-pi.img"
rm -f "$img"
truncate -s 256M "$img"
nvme_ns=",logical_block_size=4096,physical_block_size=4096,ms=8,mset=0,pi=1,pil=0"

# pci_nvme_read and pci_nvme_write (Write and Write Zeroes) are every
# data command QEMU executed; pci_nvme_dif_rw, traced right after its
# command's line, is its PI path with the command's PRACT and PRINFO:
# 0xd (PRACT, guard and reference tag checks) on reads and writes, 0x8
# (PRACT alone) on Write Zeroes.
count_checked() {
    awk '
    /pci_nvme_read / { reads++; want = "prinfo 0xd" }
    /pci_nvme_write / {
        if ($0 ~ /WRITE_ZEROES/) { zeroes++; want = "prinfo 0x8" } else { writes++; want = "prinfo 0xd" }
    }
    /pci_nvme_dif_rw / { dif++; if ($0 ~ ("pract 0x1 " want "$")) right++ }
    END {
        printf "QEMU executed %d reads, %d writes and %d Write Zeroes; %d went through its PI path, %d with the PRINFO expected (PRACT, and PRCHK guard+reference tag on reads and writes)\n", reads, writes, zeroes, dif, right
        if (reads == 0 || writes == 0 || dif != reads + writes + zeroes || right != dif) exit 1
    }' "$1" || die "not every data command carried PRACT and PRCHK (trace: $1)"
}

# Boot 1: the device test.
out="$cache/console-pi-test.log"
trace="$cache/pi-test-trace.log"
rm -f "$trace"
qemu_extra=(-trace pci_nvme_read -trace pci_nvme_write -trace pci_nvme_dif_rw -D "$trace")
log "boot 1: the device test on a PI namespace (console: $out, trace: $trace)"
boot "$cache/pi-test-initrd.gz" "$img" "$out" ",mdts=10"
verdict "$out" "VM-CHECK-OK" "the device test on a PI namespace"
grep -q "protection: Some(Protection { pi_type: Type1" "$out" || die "the driver did not see type 1 PI"
[ -s "$trace" ] || die "QEMU wrote no trace ($trace)"
count_checked "$trace"
"$check_bin" pi-image "$img" || die "the image's PI check failed"
"$check_bin" pi-corrupt "$img" || die "could not damage the image"

# Boot 2: the damaged blocks read back.
out="$cache/console-pi-detect.log"
trace="$cache/pi-detect-trace.log"
rm -f "$trace"
qemu_extra=(-trace pci_nvme_dif_prchk_guard_crc16 -trace pci_nvme_dif_prchk_reftag_crc16 -D "$trace")
log "boot 2: the damaged blocks read back (console: $out, trace: $trace)"
boot "$cache/pi-detect-initrd.gz" "$img" "$out" ",mdts=10"
verdict "$out" "VM-PI-OK" "reading the damaged blocks"
# The controller's own checks that failed: a guard that is not the
# data's CRC, a reference tag that is not the expected one.
awk '
    /pci_nvme_dif_prchk_guard_crc16/ { checks++; if ($(NF - 2) != $NF) guard++ }
    /pci_nvme_dif_prchk_reftag_crc16/ { checks++; if ($(NF - 2) != $NF) ref++ }
    END {
        printf "QEMU checked %d guards and reference tags; failed: %d guard, %d reference tag\n", checks, guard, ref
        if (guard == 0 || ref == 0) exit 1
    }' "$trace" || die "QEMU did not report the failed checks (trace: $trace)"

# Boot 3: the engine, on a fresh image. Not on boot 1's: its device test
# ends with Write Zeroes over the namespace and a Deallocate of blocks
# 0-63, and the first run of this boot found blocks 8-15 of that image
# holding zeroes with all-zero PI in an allocated extent of the file, so
# QEMU checked them (it disables the checks only for blocks its block
# layer reports as zero) and the bench's look at the first 68 KiB failed
# with the reference tag check error (see docs/design/driver.md).
img="$cache/nvme-pi-engine.img"
rm -f "$img"
truncate -s 256M "$img"
out="$cache/console-pi-engine.log"
trace="$cache/pi-engine-trace.log"
rm -f "$trace"
qemu_extra=(-trace pci_nvme_read -trace pci_nvme_write -trace pci_nvme_dif_rw -D "$trace")
log "boot 3: the engine on the PI namespace (console: $out, trace: $trace)"
boot "$cache/pi-engine-initrd.gz" "$img" "$out" ",mdts=10"
verdict "$out" "VM-ENGINE-OK" "the engine on a PI namespace"
for s in bench fsck-after-bench mkfs fsck-after-mkfs; do
    grep -q "ENGINE-STEP $s ok" "$out" || die "engine step $s did not pass (console: $out)"
done
# The bench's own counters: 1000 writes synced every 8 are 125 syncs,
# and the 1000 direct reads each went to the device.
grep -q "(125 syncs;" "$out" || die "synced-randwrite did not make its 125 syncs (console: $out)"
grep -q "device reads 1000 (4000 KiB" "$out" || die "direct-randread did not read 1000 pages from the device (console: $out)"
grep -q "pollfs filesystem, [0-9]* data blocks of 4 KiB free" "$out" || die "mkfs did not report the new filesystem (console: $out)"
[ "$(grep -c ", 0 problems" "$out")" -eq 2 ] || die "fsck did not find 0 problems twice (console: $out)"
count_checked "$trace"
log "all passed in $((SECONDS - started)) s"
