#!/usr/bin/env bash
# `just deb`: Debian packages of the release build, into target/deb/:
#   pollfs          the pollfs command, the mount helpers /sbin/mount.pollfs
#                   and /sbin/mount.fuse.pollfs (links to it: it reads its
#                   name), manual pages, bash/zsh/fish completions, and the
#                   pollfs@.service template
#   libpollfs0      libpollfs.so.0
#   libpollfs-dev   pollfs.h, libpollfs.so, libpollfs.a, pollfs.pc, libpollfs(3)
# Built with dpkg-deb from staged trees (no debian/ source package: the
# binaries come from cargo).
set -euo pipefail
cd "$(dirname "$0")/.."
# The command with TLS on NVMe/TCP (feature `tls`: OpenSSL, linked
# dynamically); the C library without (its static archive would need
# OpenSSL's too, and pollfs.pc does not name them). Two builds: one would
# unify the driver's features and give both TLS.
cargo build --release -p pollfs-cli --features tls
cargo build --release -p pollfs-capi
version=$(cargo pkgid -p pollfs-cli | sed 's/.*[@#]//')
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo "$(uname -m)-linux-gnu")
out=target/deb
rm -rf "$out/stage"
mkdir -p "$out/stage"

control() { # DIR NAME DEPENDS DESCRIPTION...
    local dir=$1 name=$2 depends=$3
    shift 3
    mkdir -p "$dir/DEBIAN"
    {
        echo "Package: $name"
        echo "Version: $version"
        echo "Architecture: $arch"
        echo "Maintainer: pollfs developers <pollfs@localhost>"
        echo "Section: admin"
        echo "Priority: optional"
        [ -n "$depends" ] && echo "Depends: $depends"
        echo "Installed-Size: $(du -sk --exclude=DEBIAN "$dir" | cut -f1)"
        echo "Description: $1"
        shift
        for line in "$@"; do echo " $line"; done
    } >"$dir/DEBIAN/control"
}

doc() { # DIR NAME
    mkdir -p "$1/usr/share/doc/$2"
    {
        echo "pollfs $version"
        echo "License: MIT OR Apache-2.0"
    } >"$1/usr/share/doc/$2/copyright"
}

# getconf prints "glibc 2.36" (no pipe into head: with pipefail a writer cut
# off by head fails the script with SIGPIPE).
libc_dep="libc6 (>= $(getconf GNU_LIBC_VERSION | cut -d' ' -f2))"

# The packages of OpenSSL's libraries (libssl, libcrypto) that PROGRAM
# loads, as this system names them (libssl3 on Debian 12, libssl3t64 on
# 13), at least the version built against; ", "-separated, with a leading
# ", " when there is any.
openssl_deps() { # PROGRAM
    local lib pkg
    for lib in $(ldd "$1" | awk '$3 ~ /\/lib(ssl|crypto)\.so/ {print $3}'); do
        dpkg -S "$(realpath "$lib")" | cut -d: -f1
    done | sort -u | while read -r pkg; do
        version=$(dpkg-query -W -f='${Version}' "$pkg")
        printf ', %s (>= %s)' "$pkg" "${version%%-*}"
    done
}
pollfs_deps="$libc_dep$(openssl_deps target/release/pollfs)"
case "$pollfs_deps" in
*libssl*) ;;
*) echo "deb.sh: target/release/pollfs does not load libssl: built without TLS?" >&2 && exit 1 ;;
esac

# pollfs
p="$out/stage/pollfs"
install -D -m 0755 target/release/pollfs "$p/usr/bin/pollfs"
mkdir -p "$p/sbin"
ln -s /usr/bin/pollfs "$p/sbin/mount.pollfs"
ln -s /usr/bin/pollfs "$p/sbin/mount.fuse.pollfs"
mkdir -p "$p/usr/share/man/man8"
for m in docs/man/*.8; do gzip -9n <"$m" >"$p/usr/share/man/man8/$(basename "$m").gz"; done
install -D -m 0644 docs/completions/pollfs.bash "$p/usr/share/bash-completion/completions/pollfs"
install -D -m 0644 docs/completions/_pollfs "$p/usr/share/zsh/vendor-completions/_pollfs"
install -D -m 0644 docs/completions/pollfs.fish "$p/usr/share/fish/vendor_completions.d/pollfs.fish"
install -D -m 0644 packaging/pollfs@.service "$p/lib/systemd/system/pollfs@.service"
doc "$p" pollfs
control "$p" pollfs "$pollfs_deps" \
    "user-space file engine for NVMe: CLI and mount" \
    "pollfs drives NVMe SSDs from user space with polled queues and serves" \
    "a filesystem through FUSE. This package has the pollfs command, the" \
    "mount helpers for fstab's fuse.pollfs type, manual pages, completions" \
    "and a systemd unit template."

# libpollfs0
l="$out/stage/libpollfs0"
install -D -m 0644 target/release/libpollfs.so "$l/usr/lib/$multiarch/libpollfs.so.0"
doc "$l" libpollfs0
control "$l" libpollfs0 "$libc_dep" \
    "pollfs's C library" \
    "libpollfs gives C programs pollfs's files, directories and queues" \
    "without a kernel on the data path."

# libpollfs-dev
d="$out/stage/libpollfs-dev"
install -D -m 0644 capi/include/pollfs.h "$d/usr/include/pollfs.h"
mkdir -p "$d/usr/lib/$multiarch/pkgconfig" "$d/usr/share/man/man3"
ln -s libpollfs.so.0 "$d/usr/lib/$multiarch/libpollfs.so"
install -m 0644 target/release/libpollfs.a "$d/usr/lib/$multiarch/libpollfs.a"
sed -e "s|@PREFIX@|/usr|" -e "s|@VERSION@|$version|" \
    -e "s|^libdir=.*|libdir=\${prefix}/lib/$multiarch|" capi/pollfs.pc.in \
    >"$d/usr/lib/$multiarch/pkgconfig/pollfs.pc"
gzip -9n <docs/man/libpollfs.3 >"$d/usr/share/man/man3/libpollfs.3.gz"
doc "$d" libpollfs-dev
control "$d" libpollfs-dev "libpollfs0 (= $version)" \
    "pollfs's C library: header, static library and pkg-config file" \
    "Build C programs against libpollfs: pollfs.h, pollfs.pc and libpollfs(3)."

for pkg in pollfs libpollfs0 libpollfs-dev; do
    dpkg-deb --root-owner-group --build "$out/stage/$pkg" "$out/${pkg}_${version}_${arch}.deb" >/dev/null
done
ls -l "$out"/*.deb
