# Sourced by the guest's /init (busybox sh): mounts, modules, finding the
# NVMe controllers, and binding one to vfio-pci.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
sh /load-modules

# Every PCI function with class "NVM Express", one a line.
nvme_addrs() {
    for d in /sys/bus/pci/devices/*; do
        if [ "$(cat "$d/class")" = "0x010802" ]; then basename "$d"; fi
    done
}

# The first of them.
nvme_addr() { nvme_addrs | head -n1; }

# The one whose controller's serial starts with $1, once the kernel's nvme
# driver has probed it (nothing before).
nvme_by_serial() {
    for a in $(nvme_addrs); do
        for s in /sys/bus/pci/devices/"$a"/nvme/nvme*/serial; do
            [ -f "$s" ] || continue
            case "$(cat "$s")" in "$1"*) echo "$a"; return ;; esac
        done
    done
}

# Hands the controller to vfio-pci (driver_override + drivers_probe), first
# unbinding it from whatever driver holds it.
bind_vfio() {
    d=/sys/bus/pci/devices/$1
    [ -e "$d/driver" ] && echo "$1" > "$d/driver/unbind"
    echo vfio-pci > "$d/driver_override"
    echo "$1" > /sys/bus/pci/drivers_probe
    [ "$(basename "$(readlink "$d/driver")")" = "vfio-pci" ]
}
