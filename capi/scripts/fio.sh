#!/usr/bin/env bash
# Builds fio 3.33 from Debian's source and the pollfs ioengine against the
# same tree (the engine uses fio's structures, so plugin and binary must
# match), then prints where they are.
#   capi/scripts/fio.sh [WORKDIR]     (default: target/fio)
# Leaves WORKDIR/fio-3.33/fio and target/release/libpollfs_fio.so. The
# source is fetched with a private apt list (deb-src bookworm), so the
# system's apt configuration is not touched; an existing tree is reused.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
src=$(capi/scripts/debian-source.sh "${1:-target/fio}" fio=3.33-3 fio_3.33.orig.tar.gz)
if [ ! -x "$src/fio" ]; then
    (cd "$src" && ./configure --disable-native >/dev/null && make -j"$(nproc)" fio >/dev/null)
fi

cargo build --release -p pollfs-capi
# libpollfs is linked in statically: the engine is one self-contained file.
cc -O2 -g -fPIC -shared -std=gnu99 -Wall -Werror \
    -D_GNU_SOURCE -D_LARGEFILE_SOURCE -D_FILE_OFFSET_BITS=64 -DFIO_INTERNAL \
    -include "$src/config-host.h" -I"$src" -I"$root/capi/include" \
    -o "$root/target/release/libpollfs_fio.so" "$root/capi/fio/pollfs_fio.c" \
    "$root/target/release/libpollfs.a" -lpthread -ldl -lm
echo "fio: $src/fio"
echo "engine: $root/target/release/libpollfs_fio.so"
