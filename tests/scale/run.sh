#!/usr/bin/env bash
# `just scale N...`: the scale table (host-tests/src/bin/scale.rs) for
# pollfs at the library, then the same workload on ext4 and xfs, each on a
# loop device over a file beside pollfs's device file, with the kernel
# filesystem's mount, unmount and fsck timed here (fsck's peak memory by
# /usr/bin/time). Needs root for the loop devices; xfs is skipped, and
# says so, when mkfs.xfs is missing. POLLFS_SCALE_ENGINES picks some of
# "pollfs ext4 xfs" (all by default).
set -euo pipefail
scale=$1
shift
counts=("$@")
work=${POLLFS_SCALE_DIR:-/var/tmp/pollfs-scale}
mkdir -p "$work"
echo "device files under $work; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
engines=" ${POLLFS_SCALE_ENGINES:-pollfs ext4 xfs} "
if [[ $engines == *" pollfs "* ]]; then
    echo
    echo "### pollfs (library)"
    "$scale" pollfs "$work" "${counts[@]}"
    rm -f "$work/scale.img"
fi

ms() { python3 -c "import sys; print(f'{(float(sys.argv[2]) - float(sys.argv[1])) * 1e3:.1f}')" "$1" "$2"; }
now() { date +%s.%N; }

kernel_fs() {
    local fs=$1 mkfs=$2 fsck=$3
    if ! command -v "${mkfs%% *}" >/dev/null; then
        echo "$fs: $mkfs not installed, skipped"
        return
    fi
    echo
    echo "### $fs (loop device, POSIX calls)"
    echo "| files | mount ms | umount ms | fsck ms | fsck peak MB |"
    echo "|---:|---:|---:|---:|---:|"
    local img="$work/$fs.img" mnt="$work/$fs.mnt" table="$work/$fs.table"
    : >"$table"
    for n in "${counts[@]}"; do
        local bytes=$(((n * 4096 * 3 + (128 << 20) + (256 << 20)) / 1048576 + 1))
        rm -f "$img"
        truncate -s "${bytes}M" "$img"
        # ext4 fixes its inode count at mkfs: room for every file, the
        # big directory's entries and the creates into it.
        local opts=()
        [ "$fs" = ext4 ] && opts=(-N $((n * 2 + 20000)))
        $mkfs -q "${opts[@]}" "$img" >/dev/null
        mkdir -p "$mnt"
        local loopdev
        loopdev=$(losetup -f --show "$img")
        mount "$loopdev" "$mnt"
        "$scale" phase posix-create "$mnt" "$n" >"$work/kv"
        umount "$mnt"
        local t0 t1 t2
        t0=$(now)
        mount "$loopdev" "$mnt"
        t1=$(now)
        "$scale" phase posix-syncs "$mnt" "$n" >>"$work/kv"
        "$scale" phase posix-bigdir "$mnt" "$n" >>"$work/kv"
        t2=$(now)
        umount "$mnt"
        local t3
        t3=$(now)
        local f0 f1
        f0=$(now)
        /usr/bin/time -f "%M" -o "$work/time" $fsck "$loopdev" >/dev/null 2>&1 || true
        f1=$(now)
        losetup -d "$loopdev"
        echo "| $n | $(ms "$t0" "$t1") | $(ms "$t2" "$t3") | $(ms "$f0" "$f1") | $(($(tail -1 "$work/time") / 1024)) |"
        sed "s/^/$n /" "$work/kv" >>"$table"
        rm -f "$img"
    done
    echo
    echo "| files | create/s | sync p50 us | p99 us | p99.9 us | max us | lookup in N-dir us | create in N-dir us |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
    for n in "${counts[@]}"; do
        local cells=""
        for k in create_rate p50_us p99_us p999_us max_us bigdir_lookup_us bigdir_create_us; do
            cells+=" $(awk -v n="$n" -v k="$k" '$1 == n { split($2, kv, "="); if (kv[1] == k) print kv[2] }' "$table") |"
        done
        echo "| $n |$cells"
    done
}

if [[ $engines == *" ext4 "* ]]; then kernel_fs ext4 mkfs.ext4 "e2fsck -fn"; fi
if [[ $engines == *" xfs "* ]]; then kernel_fs xfs mkfs.xfs "xfs_repair -n"; fi
