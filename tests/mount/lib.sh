# Helpers for the mount checks: fresh images, servers started and
# stopped, results counted. Sourced by run.sh and bench.sh.

POLLFS=${POLLFS:-target/release/pollfs}
POLLFS=$(realpath "$POLLFS")
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WORK=$(mktemp -d /tmp/pollfs-mount.XXXXXX)
# The cache mode every mount here runs in (`pollfs mount --cache-mode`).
CACHE_MODE=${CACHE_MODE:-kernel}
# Whether requests come over io_uring (`pollfs mount --uring`): with `on`
# a mount that would not use the ring fails.
URING=${URING:-auto}
declare -A SERVER
PASSED=0
FAILED=0

cleanup() {
    for name in "${!SERVER[@]}"; do
        kill -9 "${SERVER[$name]}" 2>/dev/null || true
    done
    for m in "$WORK"/*.mnt "$WORK"/*.tmpfs; do
        [ -d "$m" ] && umount -l "$m" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

ok() { echo "ok: $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }
# check WHAT COMMAND...: runs the command, counts the result.
check() {
    local what=$1
    shift
    if "$@"; then ok "$what"; else fail "$what"; fi
}

# jq_true FILE EXPR: the JSON in FILE makes EXPR true.
jq_true() { jq -e "$2" "$1" >/dev/null; }

# crate_tarball NAME: the .crate (a gzip'd tar) of crate NAME at the
# version Cargo.lock pins, from cargo's download cache (a build of the
# workspace fetched it); nothing if it is not there.
crate_tarball() {
    local ver
    ver=$(awk -v want="name = \"$1\"" '$0 == want { getline; gsub(/version = |"/, ""); print; exit }' \
        "$HERE/../../Cargo.lock")
    [ -n "$ver" ] || return 0
    find "${CARGO_HOME:-$HOME/.cargo}/registry/cache" -name "$1-$ver.crate" 2>/dev/null | head -1
}

img() { echo "$WORK/$1.img"; }
mnt() { echo "$WORK/$1.mnt"; }

# fresh NAME SIZE: a new filesystem image and an empty mount point.
fresh() {
    "$POLLFS" mkfs "file:$(img "$1")" --size "$2" >/dev/null
    mkdir -p "$(mnt "$1")"
}

# start NAME [ARGS]: `pollfs mount --foreground` in the background, once
# the mount is there.
start() {
    local name=$1
    shift
    "$POLLFS" mount --foreground --cache-mode "$CACHE_MODE" --uring "$URING" "$@" \
        "file:$(img "$name")" "$(mnt "$name")" 2>>"$WORK/$name.log" &
    SERVER[$name]=$!
    local i
    for i in $(seq 600); do
        if mountpoint -q "$(mnt "$name")"; then return 0; fi
        if ! kill -0 "${SERVER[$name]}" 2>/dev/null; then break; fi
        sleep 0.05
    done
    echo "mount of $name failed:" >&2
    cat "$WORK/$name.log" >&2
    return 1
}

# stop NAME: SIGTERM; the server must unmount, sync and exit 0.
stop() {
    local name=$1 rc=0
    kill -TERM "${SERVER[$name]}"
    wait "${SERVER[$name]}" || rc=$?
    unset "SERVER[$name]"
    if [ "$rc" -ne 0 ]; then
        echo "pollfs mount of $name exited $rc:" >&2
        cat "$WORK/$name.log" >&2
        return 1
    fi
    ! mountpoint -q "$(mnt "$name")"
}

# crash NAME: SIGKILL, and the dead mount taken away.
crash() {
    local name=$1
    kill -9 "${SERVER[$name]}"
    wait "${SERVER[$name]}" 2>/dev/null || true
    unset "SERVER[$name]"
    umount -l "$(mnt "$name")"
}

# fsck_clean NAME: `pollfs fsck` finds no problem.
fsck_clean() {
    local out
    out=$("$POLLFS" fsck "file:$(img "$1")" 2>&1) || { echo "$out" >&2; return 1; }
    echo "  $out"
    grep -q " 0 problems" <<<"$out"
}

# bench_mount: for the benchmarks, a 2 GiB image on /dev/shm served by
# `pollfs mount --threads $THREADS --cache 1g` on $MNT (server $PID), and
# a directory $TMPFS on /dev/shm beside it, so both sides run from
# memory; $SHM goes at exit.
bench_mount() {
    SHM=$(mktemp -d /dev/shm/pollfs-bench.XXXXXX)
    trap 'cleanup; rm -rf "$SHM"' EXIT
    IMG="$SHM/img"
    MNT="$WORK/bench.mnt"
    TMPFS="$SHM/tmpfs"
    mkdir -p "$MNT" "$TMPFS"
    "$POLLFS" mkfs "file:$IMG" --size 2g >/dev/null
    "$POLLFS" mount --foreground --cache-mode "$CACHE_MODE" --uring "$URING" --threads "$THREADS" \
        --cache 1g "file:$IMG" "$MNT" 2>"$WORK/bench.log" &
    SERVER[bench]=$!
    for _ in $(seq 600); do mountpoint -q "$MNT" && break; sleep 0.05; done
    mountpoint -q "$MNT"
    PID=${SERVER[bench]}
}
