#!/bin/bash
# The NVMe/TCP initiator against a real target: the Linux kernel's
# nvmet-tcp inside the test VM, exporting QEMU's NVMe namespace on
# 127.0.0.1:4420 (vm/nvmet.sh). In one boot: `pollfs identify` shows the
# Linux target; data written and read back at 1 to 256 pages, with and
# without digests (driver/examples/tcp_check.rs); I/O running while the
# port's subsystem link is removed and added back (every command must
# succeed, after a reconnect); `pollfs mkfs` and `fsck`; a writer that
# syncs after every 64 KiB is killed with SIGKILL and the filesystem,
# mounted again, holds every synced byte; a last fsck.
#
# Exit status 0 only when every step passed. Usage: bash vm/tcp-test.sh
source "$(dirname "$0")/lib.sh"

started=$SECONDS
ensure_packages
ensure_kernel
build_static --example tcp_check --bin pollfs

# crc32c_generic: the target's header and data digests (a module here, not
# a dependency modinfo lists).
modules="nvme configfs nvmet nvmet-tcp crc32c_generic"
extra="$bin_dir/examples/tcp_check:bin/tcp_check $bin_dir/pollfs:bin/pollfs"
extra="$extra $vm_dir/guest-common.sh:guest-common.sh $vm_dir/nvmet.sh:nvmet.sh"
make_initramfs "$cache/tcp-initrd.gz" <<'INIT'
#!/bin/busybox sh
. /guest-common.sh
. /nvmet.sh
fail() { echo "VM-TCP-FAILED: $*"; echo "VM-RESULT rc=1"; poweroff -f; exit 1; }
step() { echo "== $*"; }

step "nvmet-tcp on 127.0.0.1:4420"
nvmet_up || fail "target setup"
U="$TCP_URL"

step "identify"
/bin/pollfs identify "$U" > /tmp/identify || fail "identify"
cat /tmp/identify
grep -q '^model: *Linux$' /tmp/identify || fail "the model is not Linux"

step "data, no digests"
/bin/tcp_check data "$U" || fail "data"
step "data, header and data digests"
/bin/tcp_check data "$U?hdgst=1&ddgst=1" || fail "data with digests"

step "reconnect: the port's subsystem link removed and added back under I/O"
nvmet_reconnect_under_io "$U" "reconnect"

step "mkfs and fsck"
/bin/pollfs mkfs --force "$U" || fail "mkfs"
/bin/pollfs fsck "$U" || fail "fsck after mkfs"

step "a syncing writer killed with SIGKILL, then mounted again"
/bin/tcp_check writer "$U" > /tmp/synced 2>/tmp/writer.err &
w=$!
# Killed mid-stream: once 64 chunks are synced (it stops at 512).
i=0
while [ "$(grep -c SYNCED /tmp/synced)" -lt 64 ] && [ $i -lt 600 ] && kill -0 $w 2>/dev/null; do
    sleep 0.1
    i=$((i + 1))
done
kill -9 $w
wait $w
last="$(tail -n1 /tmp/synced | sed -n 's/^SYNCED \([0-9]*\)$/\1/p')"
[ -n "$last" ] || { cat /tmp/writer.err; fail "the writer synced nothing"; }
echo "killed after chunk $last was synced"
/bin/tcp_check verify "$U" "$last" || fail "synced data after the kill"
/bin/pollfs fsck "$U" || fail "fsck after the kill"

echo "VM-TCP-OK"
echo "VM-RESULT rc=0"
poweroff -f
INIT

img="$cache/nvme-tcp.img"
out="$cache/console-tcp.log"
rm -f "$img"
truncate -s 512M "$img"
log "booting (console: $out)"
# no_timer_check: under TCG on a busy host the IO-APIC timer check can
# fail and panic the guest at boot.
boot "$cache/tcp-initrd.gz" "$img" "$out" "" "no_timer_check"
verdict "$out" VM-TCP-OK "NVMe/TCP test"
log "all passed in $((SECONDS - started)) s"
