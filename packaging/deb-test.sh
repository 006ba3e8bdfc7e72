#!/usr/bin/env bash
# `just deb-test` (root): installs the packages `just deb` made, and uses
# them as an operator would: the command and its manual page, a C program
# built against libpollfs-dev through pkg-config, a filesystem mounted from
# an fstab line through the packaged helper, `pollfs stat` and `pollfs
# umount` on it, fsck; then removes the packages and checks that their
# files went with them. /etc/fstab is restored whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
debs=(target/deb/libpollfs0_*.deb target/deb/libpollfs-dev_*.deb target/deb/pollfs_*.deb)
for d in "${debs[@]}"; do [ -f "$d" ] || { echo "deb-test: $d missing: run just deb" >&2; exit 1; }; done
work=$(mktemp -d)
mnt=$work/mnt
cp /etc/fstab "$work/fstab"
cleanup() {
    mountpoint -q "$mnt" 2>/dev/null && umount -l "$mnt" || true
    cp "$work/fstab" /etc/fstab
    rm -rf "$work"
}
trap cleanup EXIT

step() { echo "== deb-test: $*"; }

step "dpkg -i"
# Container images often exclude manual pages from installs
# (dpkg.cfg.d path-exclude); these are the packages' own and are tested.
dpkg -i --path-include='/usr/share/man/*' "${debs[@]}" >/dev/null
dpkg -s pollfs libpollfs0 libpollfs-dev | grep -E '^(Package|Version|Status)'
[ "$(command -v pollfs)" = /usr/bin/pollfs ]
[ "$(readlink /sbin/mount.fuse.pollfs)" = /usr/bin/pollfs ]
[ "$(readlink /sbin/mount.pollfs)" = /usr/bin/pollfs ]
[ -f /lib/systemd/system/pollfs@.service ]
[ -f /usr/share/bash-completion/completions/pollfs ]

step "man pollfs"
# Each page whole into a variable, then matched: `man | grep -q` can end
# man with SIGPIPE, which pipefail turns into a failure.
has() { # PAGE-ARGS... -- WORD
    local word=${*: -1} text
    text=$(man -P cat "${@:1:$#-1}")
    grep -q -- "$word" <<<"$text"
}
has pollfs pollfs
has mount.pollfs fstab
has 3 libpollfs pollfs_open

step "a C program against libpollfs-dev (pkg-config)"
cc -std=c11 -o "$work/test_api" capi/tests/c/test_api.c $(pkg-config --cflags --libs pollfs) -lpthread
ldd "$work/test_api" | grep -Eq "libpollfs.so.0 => /(usr/)?lib/"
(cd "$work" && ./test_api)

step "mount through fstab"
pollfs mkfs "file:$work/img" --size 256m
mkdir -p "$mnt"
echo "file:$work/img $mnt fuse.pollfs defaults 0 0" >>/etc/fstab
mount "$mnt"
mountpoint -q "$mnt"
echo "packaged" >"$mnt/hello"
sync "$mnt/hello"
pollfs stat "$mnt" | tee "$work/stat"
grep -q "writes" "$work/stat"
pollfs umount "$mnt"
! mountpoint -q "$mnt"
pollfs fsck "file:$work/img"
mount -t pollfs "file:$work/img" "$mnt"
[ "$(cat "$mnt/hello")" = packaged ]
pollfs umount "$mnt"

step "dpkg -r"
dpkg -r pollfs libpollfs-dev libpollfs0 >/dev/null
for f in /usr/bin/pollfs /sbin/mount.pollfs /sbin/mount.fuse.pollfs /usr/include/pollfs.h \
    /lib/systemd/system/pollfs@.service /usr/share/man/man8/pollfs.8.gz; do
    if [ -e "$f" ] || [ -L "$f" ]; then
        echo "deb-test: $f is still there after dpkg -r" >&2
        exit 1
    fi
done
step "passed"
