# Sourced by the guest's /init (busybox sh) in the tests where a writer
# prints `SYNCED n` once chunk n is durable (mirror-test.sh,
# vfio-volume-test.sh, mirror-live-test.sh): the verdict lines the host
# reads, steps, waiting on the writer, and the mirror's state. Set TEST
# first: the verdict is VM-$TEST-OK or VM-$TEST-FAILED, then VM-RESULT.
# The writer runs as $w with its output in /tmp/synced and its errors in
# /tmp/writer.err.

fail() { echo "VM-$TEST-FAILED: $*"; echo "VM-RESULT rc=1"; poweroff -f; exit 1; }
passed() { echo "VM-$TEST-OK"; echo "VM-RESULT rc=0"; poweroff -f; }
step() { echo "== $* ($(cut -d' ' -f1 /proc/uptime) s)"; }

synced() { grep -c '^SYNCED' /tmp/synced; }
# Shows what the writer said on stderr, and fails with $*.
writer_fail() { cat /tmp/writer.err 2>/dev/null; fail "$*"; }
# Waits (up to $2 tenths of a second) for the writer to have synced $1
# chunks; fails if it stopped.
wait_synced() {
    i=0
    while [ "$(synced)" -lt "$1" ] && [ $i -lt "$2" ]; do
        kill -0 $w 2>/dev/null || writer_fail "the writer stopped"
        sleep 0.1
        i=$((i + 1))
    done
    [ "$(synced)" -ge "$1" ] || writer_fail "the writer synced $(synced) of $1 chunks"
}
# Waits (up to $2 tenths of a second, counted in $i) for the writer to
# say that leg $1 failed; fails if it stopped or never said so. Sets $at,
# the chunks synced by then.
wait_leg_failed() {
    i=0
    while ! grep -q "^LEG $1 FAILED$" /tmp/synced && [ $i -lt "$2" ]; do
        kill -0 $w 2>/dev/null || writer_fail "the writer stopped"
        sleep 0.1
        i=$((i + 1))
    done
    grep -q "^LEG $1 FAILED$" /tmp/synced || writer_fail "leg $1 never failed"
    at=$(synced)
    echo "the writer saw leg $1 fail after $i tenths of a second, at $at synced chunks"
}
# Kills the writer with SIGKILL (after leg 1 failed at chunk $at, and no
# other leg did); sets $last, the last chunk it said was synced.
kill_writer() {
    kill -9 $w
    wait $w
    cat /tmp/writer.err
    grep -q '^LEG 0 FAILED$' /tmp/synced && fail "leg 0 failed too"
    last="$(grep '^SYNCED' /tmp/synced | tail -n1 | sed -n 's/^SYNCED \([0-9]*\)$/\1/p')"
    [ -n "$last" ] || fail "no last synced chunk"
    echo "killed after chunk $last was synced ($((last + 1 - at)) chunks synced on leg 0 alone)"
}

# `pollfs mirror ARGS`, its output shown and kept in /tmp/status.
mirror() {
    /bin/pollfs mirror "$@" > /tmp/status || { cat /tmp/status; fail "mirror $*"; }
    cat /tmp/status
}
# Fails with $* unless /tmp/status shows both legs in sync.
both_in_sync() { [ "$(grep -c ': in sync$' /tmp/status)" -eq 2 ] || fail "$*"; }
