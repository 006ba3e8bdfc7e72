# FUSE over io_uring: with URING=on, every mount of run.sh has said it
# serves over the ring (`start` fails otherwise); here a mount proves that
# the requests went that way: the counts the server reports at unmount
# show them on the ring, and on /dev/fuse nothing but what the kernel
# sends only there (forgets, interrupts) and what came before the queues
# registered. With URING=off, the same load shows nothing on the ring.
# Sourced by run.sh.

# ring_counts NAME: "RING EIO DEV_FUSE" from the last report in NAME's log.
ring_counts() {
    sed -n 's/.*served \([0-9]*\) requests over io_uring (\([0-9]*\) answered EIO.*) and \([0-9]*\) over \/dev\/fuse.*/\1 \2 \3/p' \
        "$WORK/$1.log" | tail -1
}

# 300 files made, written, synced and read back, listed and renamed:
# at least 1,200 requests in either cache mode (CREATE, WRITE, FSYNC,
# RELEASE; RENAME), none of them answered from the kernel's caches alone.
ring_load() {
    python3 - "$1" <<'PY'
import os, sys
d = sys.argv[1]
for i in range(300):
    p = os.path.join(d, f"f{i}")
    with open(p, "wb") as f:
        f.write(bytes([i % 251]) * 4096)
        f.flush()
        os.fsync(f.fileno())
for i in range(300):
    with open(os.path.join(d, f"f{i}"), "rb") as f:
        assert f.read() == bytes([i % 251]) * 4096, i
assert len(os.listdir(d)) == 300
for i in range(300):
    os.rename(os.path.join(d, f"f{i}"), os.path.join(d, f"g{i}"))
PY
}

if [ "$URING" = on ] || [ "$URING" = off ]; then
    echo "== FUSE over io_uring ($URING): which way the requests went"
    fresh ring 256m
    start ring
    if [ "$URING" = on ]; then
        check "ring: the mount says it serves over io_uring" \
            grep -q "requests over io_uring: [0-9]* queues" "$WORK/ring.log"
    else
        check "ring: the mount says it reads /dev/fuse" \
            grep -q "threads reading /dev/fuse" "$WORK/ring.log"
    fi
    check "ring: 300 files written, synced, read back and renamed" ring_load "$(mnt ring)"
    check "ring: unmounted cleanly" stop ring
    read -r on_ring eio on_dev <<<"$(ring_counts ring)"
    echo "  $on_ring requests over io_uring ($eio answered EIO), $on_dev over /dev/fuse"
    if [ "$URING" = on ]; then
        check "ring: at least 1,200 requests over io_uring, none malformed" \
            test "${on_ring:-0}" -ge 1200 -a "${eio:-1}" -eq 0
        check "ring: at most 50 over /dev/fuse (forgets, and what came before the queues)" \
            test "${on_dev:-999999}" -le 50
    else
        check "ring: nothing over io_uring, at least 1,200 over /dev/fuse" \
            test "${on_ring:-1}" -eq 0 -a "${on_dev:-0}" -ge 1200
    fi
    check "ring: fsck is clean" fsck_clean ring
fi
