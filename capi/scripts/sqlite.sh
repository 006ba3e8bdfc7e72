#!/usr/bin/env bash
# Builds the pollfs SQLite VFS as a loadable extension for the sqlite3
# shell (target/release/libpollfs_sqlite.so) and SQLite's speedtest1 from
# Debian's sqlite3 3.40.1 source with the VFS linked in
# (target/release/speedtest1), both against the system's libsqlite3
# (libsqlite3-dev). The source comes through a private apt list (deb-src
# bookworm); the system's apt configuration is not touched.
# Also target/release/sqlite-commits (capi/sqlite/commits.c) and
# target/release/sqlite-test-vfs (capi/sqlite/test_vfs.c).
#   capi/scripts/sqlite.sh [WORKDIR]     (default: target/sqlite)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
src=$(capi/scripts/debian-source.sh "${1:-target/sqlite}" sqlite3 sqlite3_3.40.1.orig.tar.xz \
    sqlite3-3.40.1/test/speedtest1.c)

cargo build --release -p pollfs-capi
lib=$root/target/release
flags=(-O2 -g -Wall -Werror -I"$root/capi/include" -I"$root/capi/sqlite")
# The extension: libpollfs linked in, SQLite's API through the loader.
cc "${flags[@]}" -fPIC -shared -o "$lib/libpollfs_sqlite.so" "$root/capi/sqlite/pollfs_vfs.c" \
    "$lib/libpollfs.a" -lpthread -ldl -lm
# speedtest1 registers the VFS at start through its hook for a statically
# linked VFS (it calls sqlite3_register_cksumvfs(0) when built with
# SQLITE_CKSUMVFS_STATIC), named here to pollfs_sqlite_register_env.
cc -O2 -g -DSQLITE_CORE -DSQLITE_CKSUMVFS_STATIC \
    -Dsqlite3_register_cksumvfs=pollfs_sqlite_register_env \
    -I"$root/capi/include" -I"$root/capi/sqlite" -o "$lib/speedtest1" \
    "$src/test/speedtest1.c" "$root/capi/sqlite/pollfs_vfs.c" "$lib/libpollfs.a" \
    -lsqlite3 -lpthread -ldl -lm
# Commits per second with synchronous=FULL, on any VFS.
cc -O2 -g -DSQLITE_CORE -Wall -Werror -I"$root/capi/include" -I"$root/capi/sqlite" \
    -o "$lib/sqlite-commits" "$root/capi/sqlite/commits.c" "$root/capi/sqlite/pollfs_vfs.c" \
    "$lib/libpollfs.a" -lsqlite3 -lpthread -ldl -lm
# Two connections of one process on the VFS.
cc -O2 -g -DSQLITE_CORE -Wall -Werror -I"$root/capi/include" -I"$root/capi/sqlite" \
    -o "$lib/sqlite-test-vfs" "$root/capi/sqlite/test_vfs.c" "$root/capi/sqlite/pollfs_vfs.c" \
    "$lib/libpollfs.a" -lsqlite3 -lpthread -ldl -lm
echo "extension: $lib/libpollfs_sqlite.so"
echo "speedtest1: $lib/speedtest1"
