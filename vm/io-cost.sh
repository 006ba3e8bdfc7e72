#!/bin/bash
# The driver's CPU cost per 4 KiB I/O (submit plus reap), in instructions,
# under callgrind: driver/examples/io_cost drives random 4 KiB reads at a
# fixed queue depth. Collection is on only inside the example's
# driver_submit/driver_poll wrappers, and off again inside the caller's
# completion callback (io_cost::run::{{closure}}: the caller's work, not
# the driver's; the driver's call to it still counts).
#
# - emu (default): on the emulated controller, with collection off again
#   inside its register handlers (where the device executes the commands),
#   so the count is the driver's own work, including its accesses to the
#   queue memory.
# - emu-split: the same over emulated memory kept as atomic words and
#   accessed by VFIO memory's own code (pcie/words.rs), which claims no
#   page atomicity, so each completion's word holding the status is read
#   first, in one load, and the rest of the entry only when needed: the
#   memory path the driver takes on VFIO.
# - tcp: over NVMe/TCP on loopback to the test target running in another
#   process (driver/examples/tcp_target). Polls that find nothing while
#   the data is on its way are the caller waiting, not work per I/O: the
#   example waits (uncounted) before each poll so that few are idle, and
#   their average cost is measured on an idle queue (driver_idle_poll) and
#   taken out. System calls count their user-space part only.
#
# Needs valgrind. Usage: bash vm/io-cost.sh [ios] [queue-depth] [emu|emu-split|tcp]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
ios="${1:-100000}"
qd="${2:-32}"
mode="${3:-emu}"
command -v valgrind >/dev/null || { echo "io-cost: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
target="${CARGO_TARGET_DIR:-$repo/target}"
out="$(mktemp)"
tpid=""
cleanup() {
    rm -f "$out" "$out.log" "$out.url" "$out.stdout"
    if [ -n "$tpid" ]; then kill "$tpid" 2>/dev/null || true; fi
}
trap cleanup EXIT

if [ "$mode" = emu ] || [ "$mode" = emu-split ]; then
    split=""
    if [ "$mode" = emu-split ]; then split=split; fi
    cargo build --release -q --manifest-path "$repo/Cargo.toml" -p pollfs-driver --example io_cost
    valgrind --tool=callgrind --callgrind-out-file="$out" --collect-atstart=no \
        --toggle-collect='io_cost::driver_submit*' --toggle-collect='io_cost::driver_poll*' \
        --toggle-collect='*EmuController as pollfs_driver::pcie::hal::Registers>::*' \
        --toggle-collect='io_cost::run::{{closure}}' \
        "$target/release/examples/io_cost" "$ios" "$qd" ${split:+"$split"} 2> "$out.log"
    total="$(sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' "$out.log")"
    [ -n "$total" ] || { echo "io-cost: no callgrind total" >&2; exit 1; }
    echo "driver instructions: $total for $ios I/Os at queue depth $qd"
    echo "per I/O: $((total / ios))"
    exit 0
fi

[ "$mode" = tcp ] || { echo "io-cost: mode is emu, emu-split or tcp" >&2; exit 1; }
command -v callgrind_annotate >/dev/null || { echo "io-cost: needs callgrind_annotate (valgrind)" >&2; exit 1; }
cargo build --release -q --manifest-path "$repo/Cargo.toml" -p pollfs-driver \
    --example io_cost --example tcp_target
"$target/release/examples/tcp_target" 64 > "$out.url" &
tpid=$!
for _ in $(seq 50); do [ -s "$out.url" ] && break; sleep 0.1; done
url="$(head -n1 "$out.url")"
[ -n "$url" ] || { echo "io-cost: the test target did not start" >&2; exit 1; }
valgrind --tool=callgrind --callgrind-out-file="$out" --collect-atstart=no \
    --toggle-collect='io_cost::driver_submit*' --toggle-collect='io_cost::driver_poll*' \
    --toggle-collect='io_cost::driver_idle_poll*' \
    --toggle-collect='io_cost::run::{{closure}}' \
    "$target/release/examples/io_cost" "$ios" "$qd" tcp "$url" > "$out.stdout" 2> "$out.log"
cat "$out.stdout"
# Inclusive instructions of each wrapper.
incl() {
    callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null \
        | awk -v f="$1" 'index($0, f) && !seen { gsub(",", "", $1); print $1; seen = 1 }'
}
submit="$(incl 'io_cost::driver_submit')"
poll="$(incl 'io_cost::driver_poll')"
idle="$(incl 'io_cost::driver_idle_poll')"
idle_polls="$(sed -n 's/.* idle polls \([0-9]*\) .*/\1/p' "$out.stdout")"
calib="$(sed -n 's/.*calibration polls \([0-9]*\).*/\1/p' "$out.stdout")"
[ -n "$submit" ] && [ -n "$poll" ] && [ -n "$idle" ] && [ -n "$idle_polls" ] && [ -n "$calib" ] \
    || { echo "io-cost: could not read the callgrind profile" >&2; exit 1; }
per_idle=$((idle / calib))
echo "submit: $submit, poll: $poll instructions; $idle_polls idle polls at $per_idle each"
echo "per I/O, idle polls included: $(((submit + poll) / ios))"
echo "per I/O: $(((submit + poll - idle_polls * per_idle) / ios))"
