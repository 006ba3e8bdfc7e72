#!/bin/bash
# Instructions per cached 4 KiB read and per cached 4 KiB overwrite through
# the file API (owned handles, the calling thread's session), under
# callgrind: host-tests/examples/read_cost and write_cost, collection on
# only inside their one_read/one_write wrappers. Counts do not depend on
# the machine's speed. Needs valgrind.
# MEMORY is the emulated controller's DMA memory: `locked` (page-locked,
# the default) or `words` (atomic words accessed by VFIO memory's own
# code: a real controller's page copy).
# Usage: bash vm/read-write-cost.sh [read|write|both] [ops] [locked|words]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
what="${1:-both}"
ops="${2:-100000}"
memory="${3:-locked}"
command -v valgrind >/dev/null || { echo "read-write-cost: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
target="${CARGO_TARGET_DIR:-$repo/target}"
out="$(mktemp)"
trap 'rm -f "$out" "$out.log"' EXIT
cargo build --release -q --manifest-path "$repo/Cargo.toml" -p pollfs-host-tests --example read_cost --example write_cost
count() { # name example fn args...
    local name="$1" ex="$2" fn="$3"; shift 3
    valgrind --tool=callgrind --callgrind-out-file="$out" --collect-atstart=no \
        --toggle-collect="$ex::$fn*" "$target/release/examples/$ex" "$@" 2> "$out.log" >/dev/null
    local total
    total="$(sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' "$out.log")"
    [ -n "$total" ] || { echo "read-write-cost: no callgrind total for $ex" >&2; exit 1; }
    echo "$name: $((total / ops)) instructions per 4 KiB operation ($total over $ops)"
}
case "$what" in
    read|both) count "cached read ($memory memory)" read_cost one_read "$ops" "$memory" ;;
esac
case "$what" in
    write|both) count "cached overwrite ($memory memory)" write_cost one_write count 1 "$ops" "$memory" ;;
esac
