#!/usr/bin/env bash
# fio 4 KiB random reads and writes at depth 1 and 32, 1 and 2 jobs: the
# pollfs ioengine on the emulated device against fio's io_uring and psync
# engines on tmpfs, all buffered (cached), in one run with one fio binary.
#   capi/scripts/fio-bench.sh [SECONDS]     (default 5 per run)
# Prints each run's command and a table of IOPS and mean latency.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-5}
capi/scripts/fio.sh >/dev/null
fio=$PWD/target/fio/fio-3.33/fio
engine=$PWD/target/release/libpollfs_fio.so
work=$(mktemp -d)
shm=$(mktemp -d /dev/shm/pollfs-fio.XXXXXX)
trap 'rm -rf "$work" "$shm"' EXIT
common=(--thread=1 --bs=4k --size=128m --time_based --runtime="$secs" --ramp_time=1
    --group_reporting=1 --output-format=json --norandommap=1 --randrepeat=0)
rows=()
for rw in randread randwrite; do
    for qd in 1 32; do
        for jobs in 1 2; do
            for eng in pollfs io_uring psync; do
                case $eng in
                pollfs) e=(--ioengine=external:"$engine" --pollfs_dev=emu --pollfs_cache_mb=1024) ;;
                *) e=(--ioengine="$eng" --directory="$shm") ;;
                esac
                cmd=("$fio" --name="$eng-$rw" --rw="$rw" --iodepth="$qd" --numjobs="$jobs" "${e[@]}" "${common[@]}")
                echo "+ (cd $work && ${cmd[*]})" >&2
                out=$(cd "$work" && "${cmd[@]}")
                rows+=("$(python3 -c '
import json, sys
t = sys.stdin.read()
j = json.loads(t[t.index("{"):])["jobs"][0]
d = j["read"] if j["read"]["io_bytes"] else j["write"]
print("%-9s %-9s %3s %4s %10.0f %10.2f" % (sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4],
      d["iops"], d["lat_ns"]["mean"] / 1000))
' "$eng" "$rw" "$qd" "$jobs" <<<"$out")")
                rm -f "$shm"/*
            done
        done
    done
done
printf '%-9s %-9s %3s %4s %10s %10s\n' engine rw qd jobs IOPS "mean_us"
printf '%s\n' "${rows[@]}"
