# Sourced by the guest's /init (busybox sh) after guest-common.sh: the
# Linux kernel's NVMe/TCP target (nvmet-tcp) on 127.0.0.1:4420 exporting
# the QEMU NVMe namespace as subsystem "testnqn", and the kernel's own
# NVMe/TCP initiator for comparisons. See /work/shared/DESIGN.md section 9
# for where the recipe was verified.

NQN=testnqn
SUBSYS=/sys/kernel/config/nvmet/subsystems/$NQN
PORT=/sys/kernel/config/nvmet/ports/1
TCP_URL=nvme-tcp://127.0.0.1:4420/$NQN

# Loopback, configfs, the subsystem with namespace 1 on /dev/nvme0n1, the
# port, and the link that makes the port serve the subsystem. With `tls`
# the port requires TLS 1.3 (set before the link: the kernel refuses to
# change a port that serves a subsystem).
nvmet_up() {
    i=0
    # The PCI probe is asynchronous: wait for the namespace.
    while [ ! -b /dev/nvme0n1 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
    [ -b /dev/nvme0n1 ] || { echo "no /dev/nvme0n1"; return 1; }
    ip link set lo up || return 1
    mount -t configfs none /sys/kernel/config || return 1
    mkdir "$SUBSYS" && echo 1 > "$SUBSYS/attr_allow_any_host" || return 1
    mkdir "$SUBSYS/namespaces/1" || return 1
    echo -n /dev/nvme0n1 > "$SUBSYS/namespaces/1/device_path" || return 1
    echo 1 > "$SUBSYS/namespaces/1/enable" || return 1
    mkdir "$PORT" || return 1
    echo tcp > "$PORT/addr_trtype"
    echo ipv4 > "$PORT/addr_adrfam"
    echo 127.0.0.1 > "$PORT/addr_traddr"
    echo 4420 > "$PORT/addr_trsvcid"
    if [ "${1:-}" = tls ]; then
        echo tls1.3 > "$PORT/addr_tsas" || return 1
        echo required > "$PORT/addr_treq" || return 1
    fi
    nvmet_link
}

# The port stops serving the subsystem (its controllers are torn down).
nvmet_unlink() {
    rm "$PORT/subsystems/$NQN"
}

# ...and serves it again.
nvmet_link() {
    ln -s "$SUBSYS" "$PORT/subsystems/$NQN"
}

# `tcp_check reconnect DEV 14` (I/O for 14 s) while the port stops
# serving the subsystem 4 s in and serves it again 3 s later; prints what
# it said, and calls the guest's `fail` with WHAT unless it reconnected.
nvmet_reconnect_under_io() {
    /bin/tcp_check reconnect "$1" 14 > /tmp/out.reconnect 2>&1 &
    io=$!
    sleep 4
    nvmet_unlink || fail "unlink"
    echo "link removed"
    sleep 3
    nvmet_link || fail "link"
    echo "link back"
    wait $io
    status=$?
    cat /tmp/out.reconnect
    [ $status -eq 0 ] || fail "$2"
}

# Connects the kernel's initiator and prints its namespace's block device:
# the one whose subsystem NQN is ours (multipath is built in, so the node
# is named after the subsystem, and the per-path nvmeXcYnZ is hidden).
kernel_connect() {
    exec 3<>/dev/nvme-fabrics
    echo "transport=tcp,traddr=127.0.0.1,trsvcid=4420,nqn=$NQN" >&3
    reply="$(head -n1 <&3)"
    exec 3<&-
    case "$reply" in *instance=*) ;; *) echo "connect failed: $reply" >&2; return 1 ;; esac
    i=0
    while [ $i -lt 100 ]; do
        for b in /sys/block/nvme*n*; do
            n="$(basename "$b")"
            case "$n" in nvme*c*n*) continue ;; esac
            if [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] && [ -b "/dev/$n" ]; then
                echo "/dev/$n"
                return 0
            fi
        done
        sleep 0.1
        i=$((i + 1))
    done
    echo "no namespace of $NQN from the kernel initiator" >&2
    return 1
}

# A subsystem `$1` whose namespace 1 is the file `$4` (made here, `$5`
# MiB of zeros, on tmpfs, so through the page cache: tmpfs refuses
# O_DIRECT), served by port `$2` on 127.0.0.1:`$3`. Needs loopback and
# configfs up (nvmet_base).
nvmet_file_target() {
    dd if=/dev/zero of="$4" bs=1M count="$5" 2>/dev/null || return 1
    nvmet_target "$1" "$2" "$3" "$4" 1
}

# A subsystem `$1` whose namespace 1 is `$4` (a block device, or with `$5`
# = 1 a file read and written through the page cache), served by port `$2`
# on 127.0.0.1:`$3`. Needs loopback and configfs up (nvmet_base).
nvmet_target() {
    nqn=$1 port=/sys/kernel/config/nvmet/ports/$2 svcid=$3 file=$4
    subsys=/sys/kernel/config/nvmet/subsystems/$nqn
    mkdir "$subsys" && echo 1 > "$subsys/attr_allow_any_host" || return 1
    mkdir "$subsys/namespaces/1" || return 1
    echo -n "$file" > "$subsys/namespaces/1/device_path" || return 1
    echo "${5:-0}" > "$subsys/namespaces/1/buffered_io" || return 1
    echo 1 > "$subsys/namespaces/1/enable" || return 1
    mkdir "$port" || return 1
    echo tcp > "$port/addr_trtype"
    echo ipv4 > "$port/addr_adrfam"
    echo 127.0.0.1 > "$port/addr_traddr"
    echo "$svcid" > "$port/addr_trsvcid"
    ln -s "$subsys" "$port/subsystems/$nqn"
}

# Loopback and configfs, for nvmet_file_target.
nvmet_base() {
    ip link set lo up || return 1
    mount -t configfs none /sys/kernel/config
}

# Port `$1` stops serving subsystem `$2` (or serves it again).
nvmet_port_unlink() {
    rm "/sys/kernel/config/nvmet/ports/$1/subsystems/$2"
}
nvmet_port_link() {
    ln -s "/sys/kernel/config/nvmet/subsystems/$2" "/sys/kernel/config/nvmet/ports/$1/subsystems/$2"
}

# Centiseconds since boot.
now() { cut -d' ' -f1 /proc/uptime | tr -d .; }

# identify NAME URL: must connect; prints the time it took.
ok() {
    t0=$(now)
    /bin/pollfs identify "$2" > "/tmp/out.$1" 2>&1 || { cat "/tmp/out.$1"; fail "$1: identify"; }
    t1=$(now)
    grep -q '^model: *Linux$' "/tmp/out.$1" || fail "$1: the model is not Linux"
    echo "RESULT $1 connected in $(( (t1 - t0) * 10 )) ms"
}

# no_secret KEY...: no output so far (/tmp/out.*) holds any part of a
# key given (the first 16 characters of its base64).
no_secret() {
    for k in "$@"; do
        b64="$(echo "$k" | cut -d: -f3 | cut -c1-16)"
        if grep -q -F "$b64" /tmp/out.*; then fail "a key in the output"; fi
    done
}
