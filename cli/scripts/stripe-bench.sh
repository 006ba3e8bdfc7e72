#!/usr/bin/env bash
# `just stripe-bench`: `pollfs perf` on one emulated namespace and on a
# stripe of two, sequential (128 KiB) and random (4 KiB) reads at queue
# depth 32, in alternating rounds of one run, so load from elsewhere falls
# on both alike. Prints each run, then the median MiB/s of each and the
# ratio stripe / one. Arguments: seconds per run (3), rounds (3), workers
# (1: one thread, not pinned; N > 1: N threads pinned to CPUs 0..N-1,
# perf's -c).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-3}
rounds=${2:-3}
workers=${3:-1}
cores=()
[ "$workers" -gt 1 ] && cores=(-c "$(printf '0x%x' $(((1 << workers) - 1)))")
cargo build --release -q -p pollfs-cli
pollfs=./target/release/pollfs
one=emu
stripe='stripe:64k:(emu,emu)'
declare -A got
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for round in $(seq "$rounds"); do
    for w in "read 131072" "randread 4096"; do
        set -- $w
        for dev in "$one" "$stripe"; do
            cmd=("$pollfs" perf "$dev" -w "$1" -o "$2" -q 32 -t "$secs" "${cores[@]}")
            mib=$("${cmd[@]}" | awk '/^Total / {print $4}')
            [ -n "$mib" ] || { echo "no Total line from: ${cmd[*]}" >&2; exit 1; }
            echo "round $round: ${cmd[*]}: $mib MiB/s"
            got["$1 $dev"]+="$mib "
        done
    done
done
echo
printf '%-10s %14s %22s %8s\n' workload "one (MiB/s)" "stripe of two (MiB/s)" ratio
for w in read randread; do
    a=$(tr ' ' '\n' <<<"${got["$w $one"]}" | grep . | median)
    b=$(tr ' ' '\n' <<<"${got["$w $stripe"]}" | grep . | median)
    printf '%-10s %14s %22s %8s\n' "$w" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", b / a}')"
done
echo "machine: $(nproc) cores; the namespaces are emulated controllers in this process's memory"
