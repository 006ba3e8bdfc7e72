#!/bin/bash
# NVMe/TCP inside TLS 1.3 with a pre-shared key against the Linux kernel's
# nvmet-tcp in the test VM, on Debian 13's 6.12 kernel (vm_kernel=trixie in
# lib.sh: NVME_TARGET_TCP_TLS, the .nvme keyring, the handshake upcall).
# The target's side is Debian 13's own tools, unpacked from its packages
# with their libraries (ensure_trixie_packages): nvme-cli 2.13 derives the
# TLS PSK from the configured key and puts it in the .nvme keyring
# (`nvme check-tls-key --insert`), and tlshd (ktls-utils 1.0) does the
# target's handshake with it for the kernel. The port requires TLS 1.3
# (`addr_tsas` tls1.3, `addr_treq` required).
#
# In one boot: `pollfs identify` with the key and tls_derivation=compat
# (nvme-cli 2.13 derives the older way); the same key derived the RFC 8446
# way, another key (each refused: tlshd closes without an alert), and no
# TLS (the port resets the connection); then with the right key,
# driver/examples/tcp_check's data check (every I/O queue through TLS),
# mkfs, fsck, and I/O while the port's subsystem link is removed and added
# back (the reconnect runs the handshake again). No output of any run may
# hold a key.
#
# Exit status 0 only when every step passed. Usage: bash vm/tcp-tls-test.sh
source "$(dirname "$0")/lib.sh"

started=$SECONDS
vm_kernel=trixie
ensure_packages readelf:binutils
ensure_kernel
ensure_trixie_packages ktls-utils nvme-cli
# build_static builds with feature `tls` (OpenSSL linked statically).
build_static --example tcp_check --bin pollfs

# tls and the AES-GCM of TLS_AES_128_GCM_SHA256 for kTLS: the kernel asks
# modprobe for them, which the guest has not.
modules="nvme configfs nvmet nvmet-tcp tls ghash-generic gcm"
extra="$bin_dir/examples/tcp_check:bin/tcp_check $bin_dir/pollfs:bin/pollfs"
extra="$extra $vm_dir/guest-common.sh:guest-common.sh $vm_dir/nvmet.sh:nvmet.sh"
extra="$extra $(trixie_program usr/sbin/tlshd | tr '\n' ' ') $(trixie_program usr/sbin/nvme | tr '\n' ' ')"
make_initramfs "$cache/tcp-tls-initrd.gz" <<'INIT'
#!/bin/busybox sh
. /guest-common.sh
. /nvmet.sh
fail() {
    echo "VM-TCP-TLS-FAILED: $*"
    [ -f /tmp/tlshd.log ] && sed 's/^/tlshd: /' /tmp/tlshd.log | tail -n 20
    echo "VM-RESULT rc=1"
    poweroff -f
    exit 1
}
step() { echo "== $*"; }
# Test keys only: 32 bytes 0..31 and 32 bytes of 1, SHA-256 (NVMeTLSkey-1:01).
KEY="NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
OTHER="NVMeTLSkey-1:01:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQHMnzFi:"
echo "$KEY" > /tmp/tls.key
echo "$OTHER" > /tmp/wrong.key
H=nqn.2014-08.org.nvmexpress:uuid:706f6c6c-6673-2d76-6d2d-746c73303031

# refused NAME URL TEXT: must fail, saying TEXT; prints how long it took.
refused() {
    t0=$(now)
    if /bin/pollfs identify "$2" > "/tmp/out.$1" 2>&1; then fail "$1: connected"; fi
    t1=$(now)
    cat "/tmp/out.$1"
    grep -q -F "$3" "/tmp/out.$1" || fail "$1: not refused with '$3'"
    echo "RESULT $1 refused in $(( (t1 - t0) * 10 )) ms"
}
# tlshd (pid $1) has joined the kernel's handshake multicast group: one of
# its generic netlink sockets (protocol 16) has a group. Until then the
# kernel has no one to hand a handshake to and fails the connection.
tlshd_listening() {
    kill -0 "$1" 2>/dev/null || fail "tlshd exited"
    awk '$2 == 16 && $3 != 0 && $4 != "00000000" { found = 1 } END { exit !found }' /proc/net/netlink
}

step "the PSK into the .nvme keyring by nvme-cli 2.13"
grep -q ' \.nvme: ' /proc/keys || fail "no .nvme keyring (nvme-keyring not loaded?)"
/usr/sbin/nvme check-tls-key --keydata="$KEY" --hostnqn="$H" --subsysnqn="$NQN" --identity=0 \
    --insert > /tmp/out.insert 2>&1 || { cat /tmp/out.insert; fail "nvme check-tls-key --insert"; }
cat /tmp/out.insert
grep -F " psk " /proc/keys | grep -q -F "NVMe0R01 $H $NQN" || { cat /proc/keys; fail "no PSK for NVMe0R01 $H $NQN"; }

step "tlshd, with the .nvme keyring"
mkdir -p /etc
printf '[debug]\nloglevel=1\ntls=0\nnl=0\n[authenticate]\n[authenticate.client]\n[authenticate.server]\n' > /etc/tlshd.conf
/usr/sbin/tlshd -s -c /etc/tlshd.conf > /tmp/tlshd.log 2>&1 &
tlshd=$!
i=0
while ! tlshd_listening $tlshd && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
tlshd_listening $tlshd || { cat /proc/net/netlink; fail "tlshd is not listening for handshakes"; }

step "nvmet-tcp on 127.0.0.1:4420, TLS 1.3 required"
nvmet_up tls || fail "target setup"
echo "port: addr_tsas $(cat "$PORT/addr_tsas"), addr_treq $(cat "$PORT/addr_treq")"
U="$TCP_URL?hostnqn=$H"
T="$U&tls_key_file=/tmp/tls.key&tls_derivation=compat"
ok compat "$T"

step "the RFC 8446 derivation of the same key, another key, no TLS"
# tlshd sends no alert when it has no PSK for the identity and binder: the
# kernel closes the connection during the handshake.
refused rfc8446 "$U&tls_key_file=/tmp/tls.key" "closed the connection during the handshake"
refused wrong-key "$U&tls_key_file=/tmp/wrong.key&tls_derivation=compat" \
    "closed the connection during the handshake"
# The port hands the ICReq to tlshd as if it were a ClientHello, which
# fails; whatever the message, nothing may get through.
refused no-tls "$U&reconnect=2000" "NVMe/TCP: connection:"

step "data on every I/O queue, mkfs, fsck, a reconnect under I/O"
/bin/tcp_check data "$T" > /tmp/out.data 2>&1 || { cat /tmp/out.data; fail "data"; }
tail -n1 /tmp/out.data
/bin/pollfs mkfs --force "$T" > /tmp/out.mkfs 2>&1 || { cat /tmp/out.mkfs; fail "mkfs"; }
/bin/pollfs fsck "$T" > /tmp/out.fsck 2>&1 || { cat /tmp/out.fsck; fail "fsck"; }
tail -n1 /tmp/out.fsck
nvmet_reconnect_under_io "$T" "reconnect under TLS"
echo "RESULT compat reconnected"

step "no key in any output"
no_secret "$KEY" "$OTHER"
kill -0 $tlshd || fail "tlshd died"
echo "RESULT tlshd logged $(grep -c . /tmp/tlshd.log) lines"

echo "VM-TCP-TLS-OK"
echo "VM-RESULT rc=0"
poweroff -f
INIT

img="$cache/nvme-tcp-tls.img"
out="$cache/console-tcp-tls.log"
rm -f "$img"
truncate -s 512M "$img"
log "booting (console: $out)"
boot "$cache/tcp-tls-initrd.gz" "$img" "$out" "" "no_timer_check"
verdict "$out" VM-TCP-TLS-OK "NVMe/TCP TLS test"
grep '^RESULT' "$out" | sed 's/^RESULT /    /' >&2 || true
log "all passed in $((SECONDS - started)) s"
