#!/usr/bin/env bash
# Installs libpollfs under PREFIX: lib/libpollfs.so.0 (and the libpollfs.so
# link to it), lib/libpollfs.a, include/pollfs.h, lib/pkgconfig/pollfs.pc.
# Usage: install.sh PREFIX [PROFILE]   (PROFILE: release (default) or debug)
set -euo pipefail
cd "$(dirname "$0")/../.."
prefix=${1:?usage: install.sh PREFIX [PROFILE]}
profile=${2:-release}
flag=$([ "$profile" = release ] && echo --release || true)
cargo build $flag -p pollfs-capi
version=$(cargo pkgid -p pollfs-capi | sed 's/.*[@#]//')
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "target/$profile/libpollfs.so" "$prefix/lib/libpollfs.so.0"
ln -sf libpollfs.so.0 "$prefix/lib/libpollfs.so"
install -m 0644 "target/$profile/libpollfs.a" "$prefix/lib/libpollfs.a"
install -m 0644 capi/include/pollfs.h "$prefix/include/pollfs.h"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" capi/pollfs.pc.in \
    > "$prefix/lib/pkgconfig/pollfs.pc"
echo "installed libpollfs $version under $prefix"
