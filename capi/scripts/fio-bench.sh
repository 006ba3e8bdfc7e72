#!/usr/bin/env bash
# fio 4 KiB random reads and writes at depth 1 and 32, 1 and 2 jobs: the
# pollfs ioengine on the emulated device against fio's io_uring and psync
# engines on tmpfs, all buffered (cached), with one fio binary; the
# engines take turns in ROUNDS rounds and each cell is the median.
#   capi/scripts/fio-bench.sh [SECONDS [ROUNDS]]     (defaults 5, 3)
# Prints each run's command and a table of median IOPS (every round's in
# brackets) and the mean latency of the median run.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-5}
rounds=${2:-3}
capi/scripts/fio.sh >/dev/null
fio=$PWD/target/fio/fio-3.33/fio
engine=$PWD/target/release/libpollfs_fio.so
work=$(mktemp -d)
shm=$(mktemp -d /dev/shm/pollfs-fio.XXXXXX)
trap 'rm -rf "$work" "$shm"' EXIT
common=(--thread=1 --bs=4k --size=128m --time_based --runtime="$secs" --ramp_time=1
    --group_reporting=1 --output-format=json --norandommap=1 --randrepeat=0)
results=$work/results.txt
for round in $(seq "$rounds"); do
    for rw in randread randwrite; do
        for qd in 1 32; do
            for jobs in 1 2; do
                for eng in pollfs io_uring psync; do
                    case $eng in
                    pollfs) e=(--ioengine=external:"$engine" --pollfs_dev=emu --pollfs_cache_mb=1024) ;;
                    *) e=(--ioengine="$eng" --directory="$shm") ;;
                    esac
                    cmd=("$fio" --name="$eng-$rw" --rw="$rw" --iodepth="$qd" --numjobs="$jobs" "${e[@]}" "${common[@]}")
                    echo "+ (cd $work/run && ${cmd[*]})" >&2
                    mkdir -p "$work/run"
                    out=$(cd "$work/run" && "${cmd[@]}")
                    python3 -c '
import json, sys
t = sys.stdin.read()
j = json.loads(t[t.index("{"):])["jobs"][0]
d = j["read"] if j["read"]["io_bytes"] else j["write"]
print(*sys.argv[1:], round(d["iops"]), round(d["lat_ns"]["mean"] / 1000, 2))
' "$eng" "$rw" "$qd" "$jobs" <<<"$out" >> "$results"
                    rm -rf "${shm:?}"/* "$work/run"
                done
            done
        done
    done
done
python3 - "$results" "$rounds" <<'PY'
import sys
from collections import defaultdict
runs = defaultdict(list)
order = []
for line in open(sys.argv[1]):
    eng, rw, qd, jobs, iops, lat = line.split()
    key = (eng, rw, int(qd), int(jobs))
    if key not in runs:
        order.append(key)
    runs[key].append((int(iops), float(lat)))
print("%-9s %-9s %3s %4s %10s %9s  %s" % ("engine", "rw", "qd", "jobs", "IOPS", "mean_us", "rounds"))
med = {}
for key in order:
    r = sorted(runs[key])
    m = r[len(r) // 2]
    med[key] = m[0]
    print("%-9s %-9s %3d %4d %10d %9.2f  [%s]" % (*key, m[0], m[1], " ".join(str(i) for i, _ in runs[key])))
print()
print("pollfs / io_uring (medians):")
for rw in ("randread", "randwrite"):
    cells = []
    for qd in (1, 32):
        for jobs in (1, 2):
            p, u = med.get(("pollfs", rw, qd, jobs)), med.get(("io_uring", rw, qd, jobs))
            if p and u:
                cells.append("qd%d/%dj %.2fx" % (qd, jobs, p / u))
    print("  %-9s %s" % (rw, ", ".join(cells)))
PY
