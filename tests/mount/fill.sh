# Sourced by run.sh. A nearly full mount (docs/design/format.md, "Space for
# metadata"): three writers of interleaved 512-byte pieces truncate and
# rewrite their files round after round at two thirds full, with no sync,
# and none is refused (xfstests generic/074 got ENOSPC at 40% in direct
# mode, and its unmount failed and lost everything); then they fill the
# device until each is refused, with under 1% left (in kernel cache mode
# the refusal comes when the kernel's pages reach the server, and the
# close reports it); each time `pollfs umount` completes, fsck is clean,
# every byte reads back after a remount, and the unmount after that
# completes too (its checkpoint needs room beside the first one's).

echo "== writers at two thirds full, then until the device is full; umount keeps every byte"
fresh fill 128m
start fill
F=$(mnt fill)
check "fill: three rounds of truncate and rewrite at two thirds full, no write refused" \
    bash -c "python3 '$HERE/fill.py' write '$F' 3 4 6291456 3 >'$WORK/fill.rounds' && ! grep -q refused '$WORK/fill.rounds'"
check "fill: pollfs umount completes" "$POLLFS" umount "$F"
unset "SERVER[fill]"
check "fill: fsck is clean" fsck_clean fill
start fill
check "fill: every byte reads back after the remount" python3 "$HERE/fill.py" verify "$F" "$WORK/fill.rounds"
check "fill: writers until the device refuses them" \
    bash -c "python3 '$HERE/fill.py' write '$F' 3 4 33554432 1 >'$WORK/fill.full'; grep -q refused '$WORK/fill.full'"
# df's 1K blocks: what was left when every writer had been refused.
check "fill: under 1% available when writes were refused" \
    bash -c "read -r total avail < <(df --output=size,avail '$F' | tail -1); [ \$((avail * 100)) -le \"\$total\" ]"
check "fill: pollfs umount of the full device completes" "$POLLFS" umount "$F"
unset "SERVER[fill]"
check "fill: fsck of the full device is clean" fsck_clean fill
start fill
check "fill: every byte of the full device reads back" python3 "$HERE/fill.py" verify "$F" "$WORK/fill.full"
check "fill: unmounted cleanly" "$POLLFS" umount "$F"
unset "SERVER[fill]"
