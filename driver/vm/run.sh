#!/bin/bash
# Runs the VFIO smoke test (driver/examples/vfio_smoke.rs) against QEMU's
# emulated NVMe controller inside a throwaway VM: Debian's 6.1 kernel, a
# busybox initramfs that binds the controller to vfio-pci, the static test
# binary, and software emulation with an emulated Intel IOMMU.
#
# Needs (Debian 12): qemu-system-x86 qemu-system-data busybox-static cpio
# (install with: apt-get install -y --no-install-recommends qemu-system-x86
# qemu-system-data busybox-static cpio). Exit status 0 when the test passes.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="${POLLFS_VM_DIR:-/tmp/pollfs-vm}"
target_dir="${CARGO_TARGET_DIR_STATIC:-$repo/target/vm-static}"
mkdir -p "$work"

# Kernel and modules, unpacked without installing.
if [ ! -d "$work/kernel" ]; then
    pkg="$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image/{print $2; exit}')"
    (cd "$work" && apt-get download "$pkg" >/dev/null 2>&1)
    dpkg -x "$work/$pkg"_*.deb "$work/kernel"
fi
kver="$(ls "$work/kernel/lib/modules" | head -n1)"
mods="$work/kernel/lib/modules/$kver/kernel"

# The test binary, static so it runs in a bare initramfs.
RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR="$target_dir" \
    cargo build --release -q -p pollfs-driver --example vfio_smoke \
    --target x86_64-unknown-linux-gnu --manifest-path "$repo/Cargo.toml"
bin="$target_dir/x86_64-unknown-linux-gnu/release/examples/vfio_smoke"

# Initramfs.
root="$work/initramfs"
rm -rf "$root"
mkdir -p "$root"/{bin,dev,proc,sys,modules}
cp /bin/busybox "$root/bin/busybox"
for m in virt/lib/irqbypass drivers/vfio/vfio drivers/vfio/vfio_iommu_type1 \
         drivers/vfio/vfio_virqfd drivers/vfio/pci/vfio-pci-core drivers/vfio/pci/vfio-pci; do
    src="$mods/$m.ko"
    [ -f "$src" ] || src="$src.xz"
    cp "$src" "$root/modules/"
done
cp "$bin" "$root/bin/vfio_smoke"
cat > "$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in irqbypass vfio vfio_iommu_type1 vfio_virqfd vfio-pci-core vfio-pci; do
    f=/modules/$m.ko; [ -f "$f" ] || f="$f.xz"
    insmod "$f" || echo "insmod $m failed"
done
addr=""
for d in /sys/bus/pci/devices/*; do
    if [ "$(cat "$d/class")" = "0x010802" ]; then addr="$(basename "$d")"; fi
done
echo "nvme controller at $addr"
echo vfio-pci > "/sys/bus/pci/devices/$addr/driver_override"
echo "$addr" > /sys/bus/pci/drivers_probe
/bin/vfio_smoke "$addr"
echo "exit status $?"
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$work/initrd.gz"

# One run per logical block size. MDTS 10 (4 MiB) lets one command carry
# 1024 pages, which needs two chained PRP list pages.
for bs in 512 4096; do
    rm -f "$work/nvme.img"
    truncate -s 256M "$work/nvme.img"
    log="$work/console-$bs.log"
    timeout 600 qemu-system-x86_64 -nographic -no-reboot -m 1G -smp 2 -nic none \
        -kernel "$work/kernel/boot/vmlinuz-$kver" -initrd "$work/initrd.gz" \
        -drive "file=$work/nvme.img,if=none,id=nvm,format=raw" \
        -device "nvme,serial=deadbeef,drive=nvm,mdts=10,logical_block_size=$bs,physical_block_size=$bs" \
        -accel tcg -cpu max -machine q35,kernel-irqchip=split \
        -device intel-iommu,intremap=on,caching-mode=on \
        -append "console=ttyS0 panic=-1 quiet intel_iommu=on iommu=pt" | tee "$log"
    grep -q "VFIO-SMOKE-OK" "$log"
done
