# Sourced by the guest's /init (busybox sh): mounts, modules, and binding
# the NVMe controller to vfio-pci.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
sh /load-modules

# The first PCI function with class "NVM Express".
nvme_addr() {
    for d in /sys/bus/pci/devices/*; do
        if [ "$(cat "$d/class")" = "0x010802" ]; then basename "$d"; return; fi
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
