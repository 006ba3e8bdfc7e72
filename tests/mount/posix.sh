# Users, permissions and unmounting: the POSIX conformance cases against
# tmpfs (conformance.py, some as another uid through allow_other), a
# removed file's handle across a remount (handles_remount.py), an
# O_TMPFILE file open across a `kill -9` of the server (freed by recovery),
# mount(8) through the mount.fuse.pollfs helper and an fstab line,
# `pollfs umount` (durable when it returns) and a mount right after a
# plain umount. Sourced by run.sh (needs lib.sh's helpers; python3,
# util-linux).

echo "== POSIX rules against tmpfs, as root and as another user (allow_other)"
# Other users reach the mounts through $WORK.
chmod 755 "$WORK"
fresh posix 256m
start posix -o allow_other
P=$WORK/posix.tmpfs
mkdir -p "$P"
mount -t tmpfs tmpfs "$P"
check "conformance: every case as on tmpfs, but for the listed gaps" \
    python3 "$HERE/conformance.py" "$(mnt posix)" "$P"
umount "$P"
check "conformance: unmounted cleanly" stop posix
check "conformance: fsck is clean" fsck_clean posix

echo "== a file handle across a remount: a removed file's number comes back, its handle stays stale"
fresh handles 256m
start handles
check "handles: a handle taken, its file removed" \
    python3 "$HERE/handles_remount.py" take "$(mnt handles)" "$WORK/handles"
check "handles: unmounted cleanly" stop handles
start handles
check "handles: the removed file's handle does not open the file that took its number" \
    python3 "$HERE/handles_remount.py" use "$(mnt handles)" "$WORK/handles"
check "handles: unmounted cleanly after" stop handles

echo "== O_TMPFILE: an unnamed file synced and still open when the server is killed is freed by recovery"
files_before=$("$POLLFS" fsck "file:$(img posix)" | grep -o '[0-9]* files')
start posix
exec 3< <(python3 -c '
import os, sys, time
fd = os.open(sys.argv[1], os.O_TMPFILE | os.O_RDWR, 0o600)
os.write(fd, b"x" * (1 << 20))
os.fsync(fd)
print("ready", flush=True)
time.sleep(60)
' "$(mnt posix)")
tmpfile_pid=$!
read -r -t 30 -u 3 said || said=
check "O_TMPFILE: written and synced unnamed" [ "$said" = ready ]
crash posix
kill "$tmpfile_pid" 2>/dev/null
exec 3<&-
check "O_TMPFILE: fsck is clean after the crash" fsck_clean posix
start posix
check "O_TMPFILE: recovered, and unmounted cleanly" stop posix
# fsck clean, and as many files as before the unnamed one.
tmpfile_freed() {
    local report
    fsck_clean posix && report=$("$POLLFS" fsck "file:$(img posix)") && grep -q ": $files_before," <<<"$report"
}
check "O_TMPFILE: fsck is clean after the remount, and the unnamed file is gone" tmpfile_freed

echo "== mount(8) through mount.fuse.pollfs and an fstab line; pollfs umount"
fresh helper 128m
HELPER=/sbin/mount.fuse.pollfs
own_helper=0
if [ ! -e "$HELPER" ]; then
    # (-f: over a link left dangling by an earlier run that was killed)
    ln -sfn "$POLLFS" "$HELPER" && own_helper=1
fi
H=$(mnt helper)
printf '%s %s fuse.pollfs allow_other,nofail,x-test,cache_mode=%s,uring=%s 0 0\n' "file:$(img helper)" "$H" \
    "$CACHE_MODE" "$URING" \
    >"$WORK/fstab"
check "helper: mount DIR with the fstab line" mount -T "$WORK/fstab" "$H"
check "helper: the type is fuse.pollfs, with allow_other" \
    bash -c "grep -q ' $H .* - fuse.pollfs file:$(img helper) .*allow_other' /proc/self/mountinfo"
mkdir -m 1777 "$H/shared"
check "helper: another user can write through it" \
    setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "echo theirs > '$H/shared/f'"
head -c 3000000 /dev/urandom >"$H/unsynced"
sum=$(sha256sum <"$H/unsynced")
check "pollfs umount: returns after the server's checkpoint" "$POLLFS" umount "$H"
# The server has exited and let go of the device: fsck can lock it now.
check "pollfs umount: fsck at once is clean (nothing left to do)" fsck_clean helper
check "helper: mount -t fuse.pollfs -o ro" mount -t fuse.pollfs -o "ro,cache_mode=$CACHE_MODE,uring=$URING" "file:$(img helper)" "$H"
check "helper: the unsynced file is whole after the remount" \
    bash -c "[ \"\$(sha256sum <'$H/unsynced')\" = '$sum' ]"
check "helper: ro refuses a write" bash -c "! touch '$H/x' 2>/dev/null"
check "helper: mount -o remount,rw" mount -o remount,rw "$H"
check "helper: a write after the remount" bash -c "echo between > '$H/remounted'"
check "helper: mount -o remount,ro" mount -o remount,ro "$H"
check "helper: ro again refuses a write" bash -c "! touch '$H/y' 2>/dev/null"
check "helper: reads go on after the remount" bash -c "[ \"\$(cat '$H/remounted')\" = between ]"
check "helper: a remount of a directory with no pollfs mount is refused" \
    bash -c "! '$POLLFS' mount -o remount,ro emu '$WORK' 2>/dev/null"
# A plain umount returns before the server is done; a mount right after
# waits for it.
umount "$H"
check "a mount right after a plain umount waits for the server and works" \
    "$POLLFS" mount --cache-mode "$CACHE_MODE" --uring "$URING" "file:$(img helper)" "$H"
check "the other user's file is there" bash -c "[ \"\$(cat '$H/shared/f')\" = theirs ]"
check "the file written between remounts is there" bash -c "[ \"\$(cat '$H/remounted')\" = between ]"
check "pollfs umount again" "$POLLFS" umount "$H"
check "helper: fsck is clean" fsck_clean helper
if [ "$own_helper" = 1 ]; then rm -f "$HELPER"; fi
