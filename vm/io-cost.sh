#!/bin/bash
# The driver's CPU cost per 4 KiB I/O (submit plus reap), in instructions,
# under callgrind: driver/examples/io_cost drives random 4 KiB reads at
# queue depth 32 on the emulated controller. Collection is on only inside
# the example's driver_submit/driver_poll wrappers and off again inside
# the emulated controller's register handlers (where the device executes
# the commands), so the count is the driver's own work, including its
# accesses to the queue memory. Needs valgrind.
#
# Usage: bash vm/io-cost.sh [ios] [queue-depth]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
ios="${1:-100000}"
qd="${2:-32}"
command -v valgrind >/dev/null || { echo "io-cost: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
target="${CARGO_TARGET_DIR:-$repo/target}"
cargo build --release -q --manifest-path "$repo/Cargo.toml" -p pollfs-driver --example io_cost
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$out" --collect-atstart=no \
    --toggle-collect='io_cost::driver_submit*' --toggle-collect='io_cost::driver_poll*' \
    --toggle-collect='*EmuController as pollfs_driver::pcie::hal::Registers>::*' \
    "$target/release/examples/io_cost" "$ios" "$qd" 2> "$out.log"
total="$(sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' "$out.log")"
rm -f "$out.log"
[ -n "$total" ] || { echo "io-cost: no callgrind total" >&2; exit 1; }
echo "driver instructions: $total for $ios I/Os at queue depth $qd"
echo "per I/O: $((total / ios))"
