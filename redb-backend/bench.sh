#!/usr/bin/env bash
# `just redb-bench`: redb on pollfs against redb's file backend on tmpfs
# and on ext4. The ext4 filesystem is an image under target/ (on the
# machine's disk, not in memory) mounted on a loop device for the run,
# which needs root; without it the ext4 row is left out and the run says so.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p pollfs-redb --example compare
work=target/redb-bench
img="$work/ext4.img"
mnt="$work/mnt"
mkdir -p "$mnt"
cleanup() {
    if mountpoint -q "$mnt"; then umount "$mnt"; fi
    rm -f "$img"
}
trap cleanup EXIT
ext4=()
if [ "$(id -u)" = 0 ] && truncate -s 1G "$img" && mkfs.ext4 -q -F "$img" && mount -o loop "$img" "$mnt"; then
    ext4=(--ext4 "$mnt")
    echo "ext4: $(findmnt -no SOURCE "$mnt") (loop), its image on $(findmnt -T "$work" -no FSTYPE,SOURCE | head -1)"
else
    echo "no ext4 row: mounting an ext4 image on a loop device needs root (and mkfs.ext4)" >&2
fi
echo "tmpfs: /dev/shm ($(findmnt -T /dev/shm -no FSTYPE | head -1))"
echo "command: ./target/release/examples/compare ${ext4[*]} $*"
./target/release/examples/compare "${ext4[@]}" "$@"
