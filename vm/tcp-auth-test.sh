#!/bin/bash
# NVMe in-band authentication (DH-HMAC-CHAP) against the Linux kernel's
# nvmet-tcp in the test VM. The guest boots Debian 13's 6.12 kernel
# (vm_kernel=trixie in lib.sh): Debian 12's 6.1 is built without
# NVME_TARGET_AUTH. The target allows one host (by NQN) with its key
# (`dhchap_key`), and for the two-way runs the controller's key
# (`dhchap_ctrl_key`); the hash and DH group change between runs.
#
# In one boot: `pollfs identify` without authentication (for the connect
# time); then, with authentication: SHA-256 with the NULL group and with
# ffdhe2048, one-way (identify, and driver/examples/tcp_check's data
# check, so every I/O queue authenticates); no key and a wrong key,
# each refused with its message; two-way with SHA-512/ffdhe4096
# (identify, mkfs, fsck, and I/O while the port's subsystem link is
# removed and added back: the reconnect authenticates again) and
# SHA-384/ffdhe3072; an impostor target (another controller key)
# refused by pollfs. No output of any run may hold a secret.
#
# Exit status 0 only when every step passed. Usage: bash vm/tcp-auth-test.sh
source "$(dirname "$0")/lib.sh"

started=$SECONDS
vm_kernel=trixie
ensure_packages
ensure_kernel
build_static --example tcp_check --bin pollfs

modules="nvme configfs nvmet nvmet-tcp"
extra="$bin_dir/examples/tcp_check:bin/tcp_check $bin_dir/pollfs:bin/pollfs"
extra="$extra $vm_dir/guest-common.sh:guest-common.sh $vm_dir/nvmet.sh:nvmet.sh"
make_initramfs "$cache/tcp-auth-initrd.gz" <<'INIT'
#!/bin/busybox sh
. /guest-common.sh
. /nvmet.sh
fail() { echo "VM-TCP-AUTH-FAILED: $*"; echo "VM-RESULT rc=1"; poweroff -f; exit 1; }
step() { echo "== $*"; }
# Test keys only (DHHC-1 form: 32, 48 and 64 bytes, transformed with
# SHA-256, SHA-384 and SHA-512).
HOST_KEY="DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
CTRL_KEY="DHHC-1:02:ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoOEhYaHiImKi4yNjo+QkZKTvGwQfg==:"
WRONG_KEY="DHHC-1:03:MjM0NTY3ODk6Ozw9Pj9AQUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVpbXF1eX2BhYmNkZWZnaGlqa2xtbm9wcfBEbLg=:"
echo "$HOST_KEY" > /tmp/host.key
echo "$CTRL_KEY" > /tmp/ctrl.key
echo "$WRONG_KEY" > /tmp/wrong.key
H=nqn.2014-08.org.nvmexpress:uuid:706f6c6c-6673-2d76-6d2d-617574683031
HD=/sys/kernel/config/nvmet/hosts/$H

# refused NAME URL TEXT: must fail, saying TEXT.
refused() {
    if /bin/pollfs identify "$2" > "/tmp/out.$1" 2>&1; then fail "$1: connected"; fi
    cat "/tmp/out.$1"
    grep -q -F "$3" "/tmp/out.$1" || fail "$1: not refused with '$3'"
    echo "RESULT $1 refused"
}
# target HASH GROUP [CTRL-KEY]: what the target asks of the host.
target() {
    echo "hmac($1)" > "$HD/dhchap_hash" || fail "dhchap_hash $1"
    echo "$2" > "$HD/dhchap_dhgroup" || fail "dhchap_dhgroup $2"
    if [ -n "${3:-}" ]; then echo "$3" > "$HD/dhchap_ctrl_key" || fail "dhchap_ctrl_key"; fi
}

step "nvmet-tcp on 127.0.0.1:4420, any host"
nvmet_up || fail "target setup"
U="$TCP_URL?hostnqn=$H"
ok plain "$U"

step "only host $H, with its key"
mkdir "$HD" || fail "host entry"
echo "$HOST_KEY" > "$HD/dhchap_key" || fail "dhchap_key"
echo 0 > "$SUBSYS/attr_allow_any_host" || fail "attr_allow_any_host"
ln -s "$HD" "$SUBSYS/allowed_hosts/$H" || fail "allowed_hosts"
K="$U&dhchap_key_file=/tmp/host.key"
B="$K&dhchap_ctrl_key_file=/tmp/ctrl.key"

step "one-way, SHA-256, NULL group"
target sha256 null
ok sha256-null-oneway "$K"

step "one-way, SHA-256, ffdhe2048; data on every I/O queue"
target sha256 ffdhe2048
ok sha256-ffdhe2048-oneway "$K"
/bin/tcp_check data "$K" > /tmp/out.data 2>&1 || { cat /tmp/out.data; fail "data"; }
tail -n1 /tmp/out.data

step "no key, a wrong key"
refused no-key "$U" "no key is configured"
refused wrong-key "$U&dhchap_key_file=/tmp/wrong.key" "refused this host's key"

step "two-way, SHA-512, ffdhe4096: identify, mkfs, fsck, a reconnect under I/O"
target sha512 ffdhe4096 "$CTRL_KEY"
ok sha512-ffdhe4096-twoway "$B"
/bin/pollfs mkfs --force "$B" > /tmp/out.mkfs 2>&1 || { cat /tmp/out.mkfs; fail "mkfs"; }
/bin/pollfs fsck "$B" > /tmp/out.fsck 2>&1 || { cat /tmp/out.fsck; fail "fsck"; }
nvmet_reconnect_under_io "$B" "reconnect with authentication"
echo "RESULT sha512-ffdhe4096-twoway reconnected"

step "two-way, SHA-384, ffdhe3072"
target sha384 ffdhe3072
ok sha384-ffdhe3072-twoway "$B"

step "an impostor: the target holds another controller key"
target sha256 ffdhe2048 "$WRONG_KEY"
refused impostor "$B" "failed the host's check"

step "no secret in any output"
no_secret "$HOST_KEY" "$CTRL_KEY" "$WRONG_KEY"

echo "VM-TCP-AUTH-OK"
echo "VM-RESULT rc=0"
poweroff -f
INIT

img="$cache/nvme-tcp-auth.img"
out="$cache/console-tcp-auth.log"
rm -f "$img"
truncate -s 512M "$img"
log "booting (console: $out)"
boot "$cache/tcp-auth-initrd.gz" "$img" "$out" "" "no_timer_check"
verdict "$out" VM-TCP-AUTH-OK "NVMe/TCP authentication test"
grep '^RESULT' "$out" | sed 's/^RESULT /    /' >&2 || true
log "all passed in $((SECONDS - started)) s"
