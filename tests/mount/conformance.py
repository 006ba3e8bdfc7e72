#!/usr/bin/env python3
"""POSIX and Linux rules, each case run on the pollfs mount and on tmpfs in
the same run, and their results compared: return values and errnos, the
modes, owners, sizes and times left behind. Written from the man pages of
open(2), link(2), unlink(2), rename(2), rmdir(2), chmod(2), chown(2),
utimensat(2), mknod(2), truncate(2), statfs(2), xattr(7), acl(5),
path_resolution(7) and inode(7); some cases run as uid/gid 65534 (nobody, in no other group).

Every difference is printed. A difference not in EXPECTED_GAPS fails the
run, and so does a listed gap that no longer differs (it was fixed: take
it off the list).

Usage: conformance.py MOUNT_DIR TMPFS_DIR [CASE...]   (root; run by
tests/mount/run.sh; with CASEs, only those)
"""

import ctypes
import errno
import json
import os
import stat
import sys

# Case name: why pollfs differs from tmpfs there (for now).
EXPECTED_GAPS = {
}

NOBODY = 65534
GROUP = 1234  # a group nobody is not in

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def check(rc):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def utimensat(path, atime, mtime):
    """atime, mtime: (sec, nsec), or UTIME_NOW / UTIME_OMIT."""
    def ts(t):
        return Timespec(0, t) if isinstance(t, int) else Timespec(*t)
    times = (Timespec * 2)(ts(atime), ts(mtime))
    check(libc.utimensat(AT_FDCWD, os.fsencode(path), times, 0))


def renameat2(a, b, flags):
    check(libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), flags))


def r(f, *args, **kw):
    """What a call gives: "ok", its value, or the errno's name."""
    try:
        v = f(*args, **kw)
        return "ok" if v is None else v
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def opened(path, flags, mode=0o644):
    """open(2), and close: "ok" or the errno's name."""
    def go():
        os.close(os.open(path, flags, mode))
    return r(go)


def mode(p):
    return oct(os.lstat(p).st_mode & 0o7777)


def owner(p):
    st = os.lstat(p)
    return (st.st_uid, st.st_gid)


def size(p):
    return os.lstat(p).st_size


def write(p, data=b"x", flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, m=0o644):
    fd = os.open(p, flags, m)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def as_nobody(fn):
    """fn() run in a child as uid/gid 65534 with no other group."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = fn()
        except BaseException as e:  # reported, and compared
            out = "raised %r" % e
        os.write(wr, json.dumps(out).encode())
        os._exit(0)
    os.close(wr)
    data = b""
    while True:
        chunk = os.read(rd, 65536)
        if not chunk:
            break
        data += chunk
    os.close(rd)
    os.waitpid(pid, 0)
    return json.loads(data)


# --- the cases: each takes a fresh directory (mode 0777, root's) and returns
# what it saw -------------------------------------------------------------

def open_flags(d):
    f = d + "/f"
    write(f, b"hello")
    os.symlink("f", d + "/l")
    os.mkdir(d + "/sub")
    out = [
        opened(f, os.O_CREAT | os.O_EXCL | os.O_WRONLY),
        opened(d + "/new", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666),
        mode(d + "/new"),
        opened(d + "/l", os.O_CREAT | os.O_EXCL | os.O_WRONLY),
        opened(d + "/l", os.O_RDONLY | os.O_NOFOLLOW),
        opened(f, os.O_RDONLY | os.O_DIRECTORY),
        opened(d + "/sub", os.O_RDONLY | os.O_DIRECTORY),
        opened(d + "/sub", os.O_WRONLY),
        opened(d + "/sub", os.O_RDWR),
        opened(d + "/missing", os.O_RDONLY),
        opened(f + "/x", os.O_RDONLY),
        opened(d + "/sub/", os.O_CREAT | os.O_WRONLY),
        opened(d + "/nope/", os.O_CREAT | os.O_WRONLY),
    ]
    # O_TRUNC empties; O_APPEND writes at the end whatever the offset.
    os.close(os.open(f, os.O_WRONLY | os.O_TRUNC))
    out.append(size(f))
    write(f, b"abc")
    fd = os.open(f, os.O_WRONLY | os.O_APPEND)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, b"de")
    out.append(os.lseek(fd, 0, os.SEEK_CUR))
    os.close(fd)
    out.append(open(f, "rb").read().decode())
    # O_CREAT through a dangling symlink makes its target.
    os.symlink("target", d + "/dangling")
    out.append(opened(d + "/dangling", os.O_CREAT | os.O_WRONLY))
    out.append(os.path.exists(d + "/target"))
    # A read-only descriptor refuses writes, a write-only one reads.
    fd = os.open(f, os.O_RDONLY)
    out.append(r(os.write, fd, b"x"))
    os.close(fd)
    fd = os.open(f, os.O_WRONLY)
    out.append(r(os.read, fd, 1))
    os.close(fd)
    # The umask masks the mode given to creat and mkdir.
    old = os.umask(0o027)
    os.close(os.open(d + "/masked", os.O_CREAT | os.O_WRONLY, 0o777))
    os.mkdir(d + "/maskeddir", 0o777)
    os.umask(old)
    out += [mode(d + "/masked"), mode(d + "/maskeddir")]
    return out


def open_permissions(d):
    write(d + "/ro", b"r", m=0o644)
    os.chmod(d + "/ro", 0o644)
    write(d + "/none", b"n")
    os.chmod(d + "/none", 0o000)
    os.mkdir(d + "/closed", 0o755)
    os.mkdir(d + "/nox", 0o766)
    write(d + "/nox/f")

    def nobody():
        return [
            opened(d + "/ro", os.O_RDONLY),
            opened(d + "/ro", os.O_WRONLY),
            opened(d + "/ro", os.O_RDWR | os.O_TRUNC),
            opened(d + "/none", os.O_RDONLY),
            opened(d + "/closed/new", os.O_CREAT | os.O_WRONLY),
            opened(d + "/nox/f", os.O_RDONLY),
            r(os.listdir, d + "/nox"),
            r(os.mkdir, d + "/closed/sub"),
            opened(d + "/mine", os.O_CREAT | os.O_WRONLY, 0o640),
        ]
    out = as_nobody(nobody)
    out += [mode(d + "/mine"), owner(d + "/mine")]
    return out


AT_EMPTY_PATH = 0x1000
AT_SYMLINK_FOLLOW = 0x400


def o_tmpfile(d):
    """An unnamed file: nlink 0, gone at its close unless linked first
    (through /proc/self/fd, or linkat(2) with AT_EMPTY_PATH); with O_EXCL
    it may never be linked."""
    def unnamed():
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
        os.write(fd, b"tmp")
        st = os.fstat(fd)
        os.close(fd)
        return [st.st_nlink, oct(st.st_mode & 0o7777), st.st_size]

    def linked(how):
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o640)
        os.write(fd, b"named " + how.encode())
        if how == "proc":
            link_proc_fd(fd, d + "/" + how)
        else:
            libc_linkat_empty(fd, d + "/" + how)
        os.write(fd, b"+")
        nlink = os.fstat(fd).st_nlink
        os.close(fd)
        st = os.lstat(d + "/" + how)
        return [nlink, st.st_nlink, oct(st.st_mode & 0o7777), open(d + "/" + how, "rb").read().decode()]

    def excl():
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR | os.O_EXCL, 0o600)
        try:
            return [r(link_proc_fd, fd, d + "/excl"),
                    r(libc_linkat_empty, fd, d + "/excl")]
        finally:
            os.close(fd)

    def unlinked_again():
        # Named, then unlinked while open: Linux does not let it be named again.
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
        link_proc_fd(fd, d + "/again")
        os.unlink(d + "/again")
        try:
            return r(link_proc_fd, fd, d + "/again2")
        finally:
            os.close(fd)

    out = [r(unnamed), sorted(os.listdir(d))]
    out += [r(linked, "proc"), r(linked, "empty_path"), r(excl), r(unlinked_again)]
    out.append(sorted(os.listdir(d)))
    # As nobody: owner, mode after the umask, and a name of its own.
    os.mkdir(d + "/open", 0o777)
    os.chmod(d + "/open", 0o777)
    out.append(as_nobody(lambda: r(linked, "open/../open/mine")))
    out.append(owner(d + "/open/mine"))
    # Not in a directory nobody may write, nor on a file.
    os.mkdir(d + "/closed", 0o755)
    out.append(as_nobody(lambda: opened(d + "/closed", os.O_TMPFILE | os.O_RDWR, 0o600)))
    out.append(opened(d + "/proc", os.O_TMPFILE | os.O_RDWR, 0o600))
    return out


def libc_linkat_empty(fd, path):
    check(libc.linkat(fd, b"", AT_FDCWD, os.fsencode(path), AT_EMPTY_PATH))


def link_proc_fd(fd, path):
    """linkat(2) of /proc/self/fd/FD with AT_SYMLINK_FOLLOW (os.link may
    call link(2), which links the /proc symlink itself)."""
    src = os.fsencode("/proc/self/fd/%d" % fd)
    check(libc.linkat(AT_FDCWD, src, AT_FDCWD, os.fsencode(path), AT_SYMLINK_FOLLOW))


def links(d):
    write(d + "/f")
    os.mkdir(d + "/dir")
    out = [
        r(os.link, d + "/f", d + "/g"),
        os.lstat(d + "/f").st_nlink,
        r(os.link, d + "/f", d + "/g"),
        r(os.link, d + "/dir", d + "/dir2"),
        r(os.link, d + "/missing", d + "/h"),
        r(os.link, d + "/f", d + "/missing/h"),
    ]
    os.symlink("f", d + "/s")
    out.append(r(os.link, d + "/s", d + "/s2"))
    out.append(stat.S_ISLNK(os.lstat(d + "/s2").st_mode))
    write(d + "/rootonly", b"r")
    os.chmod(d + "/rootonly", 0o600)
    write(d + "/rootshared", b"r")
    os.chmod(d + "/rootshared", 0o666)
    # protected_hardlinks: nobody may not link a file it cannot read and
    # write (the VFS decides; both should agree).
    out.append(as_nobody(lambda: [
        r(os.link, d + "/rootonly", d + "/mine1"),
        r(os.link, d + "/rootshared", d + "/mine2"),
    ]))
    os.unlink(d + "/f")
    out.append(os.lstat(d + "/g").st_nlink)
    return out


def unlink_and_rmdir(d):
    os.mkdir(d + "/dir")
    write(d + "/dir/f")
    os.mkdir(d + "/empty")
    write(d + "/f")
    out = [
        r(os.unlink, d + "/dir"),
        r(os.rmdir, d + "/dir"),
        r(os.rmdir, d + "/f"),
        r(os.rmdir, d + "/empty/."),
        r(os.rmdir, d + "/empty/.."),
        r(os.rmdir, d + "/missing"),
        r(os.unlink, d + "/missing"),
        r(os.unlink, d + "/f/"),
        r(os.rmdir, d + "/empty"),
        r(os.unlink, d + "/f"),
        sorted(os.listdir(d)),
    ]
    os.mkdir(d + "/closed", 0o755)
    write(d + "/closed/f")
    os.mkdir(d + "/closed/sub")
    out.append(as_nobody(lambda: [
        r(os.unlink, d + "/closed/f"),
        r(os.rmdir, d + "/closed/sub"),
    ]))
    return out


def sticky_directories(d):
    os.chmod(d, 0o1777)
    write(d + "/roots", b"r")
    os.chmod(d + "/roots", 0o666)
    os.mkdir(d + "/rootdir", 0o777)

    def nobody():
        write(d + "/mine")
        return [
            r(os.unlink, d + "/roots"),
            r(os.rename, d + "/roots", d + "/moved"),
            r(os.rename, d + "/mine", d + "/roots"),
            r(os.rmdir, d + "/rootdir"),
            r(os.rename, d + "/mine", d + "/mine2"),
            r(os.unlink, d + "/mine2"),
            # The file itself is writable: writing it is fine.
            r(write, d + "/roots", b"w", os.O_WRONLY),
        ]
    out = as_nobody(nobody)
    write(d + "/nobodys")
    os.chown(d + "/nobodys", NOBODY, NOBODY)
    out.append(r(os.unlink, d + "/nobodys"))
    out.append(sorted(os.listdir(d)))
    return out


def rename_rules(d):
    os.makedirs(d + "/a/b")
    os.mkdir(d + "/full")
    write(d + "/full/x")
    os.mkdir(d + "/empty")
    write(d + "/f")
    write(d + "/g", b"gg")
    out = [
        r(os.rename, d + "/a", d + "/a/b/c"),
        r(os.rename, d + "/a", d + "/full"),
        r(os.rename, d + "/f", d + "/empty"),
        r(os.rename, d + "/empty", d + "/f"),
        r(os.rename, d + "/f", d + "/f"),
        r(os.rename, d + "/missing", d + "/z"),
        r(os.rename, d + "/f", d + "/missing/z"),
        r(os.rename, d + "/a/.", d + "/q"),
        r(renameat2, d + "/f", d + "/g", RENAME_NOREPLACE),
        r(renameat2, d + "/f", d + "/g", RENAME_EXCHANGE),
        size(d + "/f"),
        r(renameat2, d + "/f", d + "/nothere", RENAME_EXCHANGE),
        r(renameat2, d + "/f", d + "/g", RENAME_NOREPLACE | RENAME_EXCHANGE),
        r(os.rename, d + "/a", d + "/empty"),
        sorted(os.listdir(d)),
        os.lstat(d).st_nlink,
    ]
    # Moving a directory to another parent rewrites its "..": it needs
    # write permission on the directory itself.
    os.mkdir(d + "/open", 0o777)
    os.mkdir(d + "/open/rootsdir", 0o755)
    os.mkdir(d + "/open2", 0o777)
    out.append(as_nobody(lambda: [
        r(os.rename, d + "/open/rootsdir", d + "/open2/rootsdir"),
        r(os.rename, d + "/open/rootsdir", d + "/open/renamed"),
    ]))
    # A hard link renamed onto its other name changes nothing.
    write(d + "/h1")
    os.link(d + "/h1", d + "/h2")
    out.append(r(os.rename, d + "/h1", d + "/h2"))
    out.append(sorted(n for n in os.listdir(d) if n.startswith("h")))
    return out


def chmod_and_chown(d):
    f = d + "/f"
    write(f)
    os.chmod(f, 0o644)
    os.mkdir(d + "/own", 0o777)

    def nobody():
        write(d + "/own/m")
        return [
            r(os.chmod, f, 0o777),
            r(os.chown, f, NOBODY, NOBODY),
            r(os.chown, d + "/own/m", 0, -1),
            r(os.chown, d + "/own/m", -1, GROUP),
            r(os.chown, d + "/own/m", -1, NOBODY),
            r(os.chmod, d + "/own/m", 0o4755),
            mode(d + "/own/m"),
        ]
    out = as_nobody(nobody)
    # chmod g+s by an owner outside the file's group: the bit is dropped.
    os.chown(d + "/own/m", NOBODY, GROUP)
    out.append(as_nobody(lambda: [r(os.chmod, d + "/own/m", 0o2755), mode(d + "/own/m")]))
    # chown drops set-user-id, and set-group-id where the group may
    # execute, even root's chown; a directory keeps them.
    for m in (0o6755, 0o2745, 0o4700):
        os.chmod(f, m)
        os.chown(f, NOBODY, -1)
        out.append(mode(f))
        os.chown(f, 0, 0)
    os.chmod(f, 0o6755)
    os.chown(f, -1, -1)
    out.append(mode(f))
    os.mkdir(d + "/sd")
    os.chmod(d + "/sd", 0o3775)
    os.chown(d + "/sd", NOBODY, GROUP)
    out.append(mode(d + "/sd"))
    os.chmod(f, 0o755)
    os.chmod(f, 0o107755)
    out.append(mode(f))
    return out


def setuid_cleared_on_write_and_truncate(d):
    f = d + "/f"
    write(f, b"data")
    out = []
    for m in (0o4777, 0o6777, 0o2767, 0o2777, 0o4766):
        os.chmod(f, m)
        out.append(as_nobody(lambda: r(write, f, b"y", os.O_WRONLY | os.O_APPEND)))
        out.append(mode(f))
    os.chmod(f, 0o6777)
    out.append(as_nobody(lambda: r(os.truncate, f, 1)))
    out.append(mode(f))
    os.chmod(f, 0o6777)
    write(f, b"root", os.O_WRONLY | os.O_APPEND)
    out.append(mode(f))
    os.truncate(f, 2)
    out.append(mode(f))
    os.chmod(f, 0o4777)
    out.append(as_nobody(lambda: r(write, f, b"y", os.O_WRONLY | os.O_TRUNC)))
    out.append(mode(f))
    # fallocate past the end by another user, and a write by the owner
    # (not root) of its own set-user-id file.
    os.chmod(f, 0o6777)

    def grow():
        fd = os.open(f, os.O_WRONLY)
        try:
            os.posix_fallocate(fd, 0, 1 << 16)
        finally:
            os.close(fd)
    out.append(as_nobody(lambda: r(grow)))
    out.append(mode(f))
    os.chown(f, NOBODY, NOBODY)
    os.chmod(f, 0o6755)
    out.append(as_nobody(lambda: r(write, f, b"own", os.O_WRONLY | os.O_APPEND)))
    out.append(mode(f))
    return out


def setgid_directories(d):
    sg = d + "/sg"
    os.mkdir(sg)
    os.chown(sg, 0, GROUP)
    os.chmod(sg, 0o2777)
    write(sg + "/f")
    os.mkdir(sg + "/sub", 0o755)
    os.symlink("f", sg + "/l")
    out = [owner(sg + "/f"), owner(sg + "/sub"), mode(sg + "/sub"), owner(sg + "/l")]

    def nobody():
        write(sg + "/nf", m=0o2755)
        os.mkdir(sg + "/nd", 0o755)
        return [owner(sg + "/nf"), mode(sg + "/nf"), owner(sg + "/nd"), mode(sg + "/nd")]
    out.append(as_nobody(nobody))
    # Outside a set-group-id directory a new file takes the creator's group.
    out.append(as_nobody(lambda: (write(d + "/plain"), owner(d + "/plain"))[1]))
    return out


def utimensat_rules(d):
    f = d + "/f"
    write(f)
    os.chmod(f, 0o666)
    ro = d + "/ro"
    write(ro)
    os.chmod(ro, 0o644)
    utimensat(f, (1_000_000_000, 123_456_789), (1_100_000_000, 987_654_321))
    st = os.stat(f)
    out = [st.st_atime_ns, st.st_mtime_ns]
    utimensat(f, UTIME_OMIT, UTIME_OMIT)
    st = os.stat(f)
    out += [st.st_atime_ns, st.st_mtime_ns]
    utimensat(f, (5, 6), UTIME_OMIT)
    st = os.stat(f)
    out += [st.st_atime_ns, st.st_mtime_ns]
    c0 = os.stat(f).st_ctime_ns
    utimensat(f, UTIME_OMIT, UTIME_NOW)
    st = os.stat(f)
    out += [st.st_atime_ns, st.st_mtime_ns > 1_100_000_000 * 10**9, st.st_ctime_ns >= c0]
    out.append(r(utimensat, f, (-1, 0), UTIME_OMIT))
    out.append(r(utimensat, f, (0, 1_000_000_000), UTIME_OMIT))
    # Who may set which: the owner (or root) any time; a user who may
    # write the file only both to now.
    out.append(as_nobody(lambda: [
        r(utimensat, f, UTIME_NOW, UTIME_NOW),
        r(utimensat, f, (7, 0), (8, 0)),
        r(utimensat, f, UTIME_NOW, UTIME_OMIT),
        r(utimensat, ro, UTIME_NOW, UTIME_NOW),
        r(utimensat, ro, UTIME_OMIT, UTIME_OMIT),
    ]))
    # A write or truncate sets mtime and ctime.
    utimensat(f, (5, 0), (5, 0))
    write(f, b"more", os.O_WRONLY | os.O_APPEND)
    out.append(os.stat(f).st_mtime_ns > 5 * 10**9)
    utimensat(f, (5, 0), (5, 0))
    os.truncate(f, 1)
    out.append(os.stat(f).st_mtime_ns > 5 * 10**9)
    # A new name sets the directory's mtime.
    utimensat(d, (5, 0), (5, 0))
    write(d + "/g")
    out.append(os.stat(d).st_mtime_ns > 5 * 10**9)
    return out


def times_before_the_epoch(d):
    """xfstests generic/258: a time before 1970 reads back as set
    (`touch -a -d @-1000`), atime as mtime, to the nanosecond."""
    f = d + "/f"
    write(f)
    utimensat(f, (-1000, 0), UTIME_OMIT)
    out = [os.stat(f).st_atime_ns]
    utimensat(f, (-2_208_988_800, 500), (-1, 999_999_999))
    st = os.stat(f)
    out += [st.st_atime_ns, st.st_mtime_ns]
    return out


def mknod_fifo_and_devices(d):
    return [
        r(os.mkfifo, d + "/fifo"),
        r(os.mknod, d + "/sock", stat.S_IFSOCK | 0o644),
        r(os.mknod, d + "/chr", stat.S_IFCHR | 0o644, os.makedev(1, 3)),
        r(os.mknod, d + "/reg", stat.S_IFREG | 0o640),
        r(os.mknod, d + "/blk", stat.S_IFBLK | 0o600, os.makedev(259, 70000)),
        r(os.mknod, d + "/dir", stat.S_IFDIR | 0o755),
        sorted(os.listdir(d)),
        [
            (n, oct(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev), st.st_size)
            for n in ["fifo", "sock", "chr", "blk", "reg"]
            for st in [os.lstat(d + "/" + n)]
        ],
    ]


def symlink_loops(d):
    os.symlink("b", d + "/a")
    os.symlink("a", d + "/b")
    os.symlink("self", d + "/self")
    write(d + "/t0")
    for i in range(1, 42):
        os.symlink("t%d" % (i - 1), d + "/t%d" % i)
    return [
        opened(d + "/a", os.O_RDONLY),
        opened(d + "/self", os.O_RDONLY),
        r(os.stat, d + "/a/x"),
        opened(d + "/t40", os.O_RDONLY),
        opened(d + "/t41", os.O_RDONLY),
        r(os.mkdir, d + "/a"),
        r(os.readlink, d + "/self"),
        r(os.symlink, "", d + "/empty"),
        r(os.readlink, d + "/t0"),
        opened(d + "/a", os.O_CREAT | os.O_WRONLY),
    ]


def name_limits(d):
    long_ok = "n" * 255
    too_long = "n" * 256
    out = [
        opened(d + "/" + long_ok, os.O_CREAT | os.O_WRONLY),
        opened(d + "/" + too_long, os.O_CREAT | os.O_WRONLY),
        r(os.mkdir, d + "/" + too_long),
        r(os.stat, d + "/" + too_long),
        r(os.symlink, "x", d + "/" + too_long),
        r(os.rename, d + "/" + long_ok, d + "/" + too_long),
        r(os.link, d + "/" + long_ok, d + "/" + too_long),
        # A symlink target up to PATH_MAX - 1 bytes.
        r(os.symlink, "t" * 4095, d + "/longtarget"),
        r(lambda: len(os.readlink(d + "/longtarget"))),
        r(os.symlink, "t" * 4096, d + "/toolong"),
    ]
    # A path of PATH_MAX bytes or more (under names that each fit).
    deep = d
    while len(deep) < 4200:
        deep += "/" + "p" * 200
    out.append(r(os.stat, deep))
    out.append(opened(deep, os.O_CREAT | os.O_WRONLY))
    return out


def truncate_rules(d):
    f = d + "/f"
    write(f, b"0123456789")
    out = [r(os.truncate, f, 4), size(f), open(f, "rb").read().decode()]
    out.append(r(os.truncate, f, 8))
    out.append(open(f, "rb").read())
    out.append(r(os.truncate, f, -1))
    os.mkdir(d + "/dir")
    out.append(r(os.truncate, d + "/dir", 0))
    out.append(r(os.truncate, d + "/missing", 0))
    fd = os.open(f, os.O_RDONLY)
    out.append(r(os.ftruncate, fd, 0))
    os.close(fd)
    fd = os.open(f, os.O_WRONLY)
    out.append(r(os.ftruncate, fd, 1 << 30))
    out.append(size(f))
    out.append(r(os.ftruncate, fd, 3))
    os.close(fd)
    out.append(size(f))
    os.chmod(f, 0o644)
    out.append(as_nobody(lambda: r(os.truncate, f, 0)))
    os.chmod(f, 0o666)
    out.append(as_nobody(lambda: r(os.truncate, f, 0)))
    out.append(size(f))
    # A truncated file reads zeros past the old end.
    write(f, b"abcdef")
    os.truncate(f, 2)
    os.truncate(f, 6)
    out.append(open(f, "rb").read())
    return out


def statfs_fields(d):
    st = os.statvfs(d)
    return [
        st.f_namemax,
        st.f_bsize > 0 and st.f_frsize > 0,
        st.f_blocks >= st.f_bfree >= st.f_bavail,
        st.f_files >= st.f_ffree,
        r(os.statvfs, d + "/missing"),
    ]


def xattrs(d):
    write(d + "/f")
    return [
        r(os.setxattr, d + "/f", "user.k", b"v"),
        r(os.getxattr, d + "/f", "user.k"),
        r(os.listxattr, d + "/f"),
        r(os.setxattr, d + "/f", "user.k", b"w", os.XATTR_CREATE),
        r(os.setxattr, d + "/f", "user.n", b"w", os.XATTR_REPLACE),
        r(os.setxattr, d + "/f", "user.big", b"x" * 65536),
        r(os.setxattr, d + "/f", "user.big", b"x" * 65537),
        r(os.setxattr, d + "/f", "user." + "n" * 251, b""),
        r(os.getxattr, d + "/f", "user.none"),
        r(os.removexattr, d + "/f", "user.k"),
        r(os.removexattr, d + "/f", "user.k"),
        sorted(os.listxattr(d + "/f")),
    ]


# POSIX ACLs (acl(5)) as system.posix_acl_* values: a version (2), then
# (tag u16, perm u16, id u32) entries, little-endian.
USER_OBJ, USER, GROUP_OBJ, GROUP_ENTRY, MASK, OTHER = 1, 2, 4, 8, 0x10, 0x20
NO_ID = 0xFFFFFFFF
ACCESS = "system.posix_acl_access"
DEFAULT = "system.posix_acl_default"


def writes_take_file_capabilities_away(d):
    """xfstests generic/093: a write or truncate removes
    security.capability (Linux's file_remove_privs), even by root; other
    attributes stay."""
    caps = "security.capability"
    # VFS_CAP_REVISION_2 with cap_setuid permitted and effective.
    value = bytes([0, 0, 0, 2, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    f = d + "/f"
    write(f, b"0123456789")
    out = []
    for how in ("write", "truncate", "ftruncate", "o_trunc"):
        os.setxattr(f, caps, value)
        os.setxattr(f, "user.k", b"v")
        if how == "write":
            fd = os.open(f, os.O_WRONLY)
            os.pwrite(fd, b"x", 3)
            os.close(fd)
        elif how == "truncate":
            os.truncate(f, 5)
        elif how == "ftruncate":
            fd = os.open(f, os.O_WRONLY)
            os.ftruncate(fd, 2)
            os.close(fd)
        else:
            write(f, b"abc")
        out.append((how, r(os.getxattr, f, caps), r(os.getxattr, f, "user.k")))
    return out


def acl(*entries):
    out = (2).to_bytes(4, "little")
    for tag, perm, *ident in entries:
        out += tag.to_bytes(2, "little") + perm.to_bytes(2, "little")
        out += (ident[0] if ident else NO_ID).to_bytes(4, "little")
    return out


def can(path, flags):
    """What nobody gets opening `path`."""
    return as_nobody(lambda: opened(path, flags))


def acl_named_entries_and_the_mask(d):
    f = d + "/f"
    write(f, b"secret")
    os.chmod(f, 0o640)
    out = [can(f, os.O_RDONLY)]
    # A named user entry grants what the mask lets through.
    out.append(r(os.setxattr, f, ACCESS, acl(
        (USER_OBJ, 6), (USER, 6, NOBODY), (GROUP_OBJ, 4), (MASK, 4), (OTHER, 0))))
    out += [mode(f), can(f, os.O_RDONLY), can(f, os.O_WRONLY)]
    out.append(r(os.setxattr, f, ACCESS, acl(
        (USER_OBJ, 6), (USER, 6, NOBODY), (GROUP_OBJ, 4), (MASK, 6), (OTHER, 0))))
    out += [mode(f), can(f, os.O_WRONLY)]
    # A named group entry: nobody's group.
    g = d + "/g"
    write(g, b"group")
    os.chmod(g, 0o600)
    out.append(r(os.setxattr, g, ACCESS, acl(
        (USER_OBJ, 6), (GROUP_OBJ, 0), (GROUP_ENTRY, 4, NOBODY), (MASK, 4), (OTHER, 0))))
    out += [mode(g), can(g, os.O_RDONLY), can(g, os.O_WRONLY)]
    # An empty mask takes the named entries' access away.
    out.append(r(os.setxattr, g, ACCESS, acl(
        (USER_OBJ, 6), (GROUP_OBJ, 0), (GROUP_ENTRY, 4, NOBODY), (MASK, 0), (OTHER, 0))))
    out += [mode(g), can(g, os.O_RDONLY)]
    # The same in a directory: search and create through a named entry.
    os.mkdir(d + "/closed", 0o700)
    out.append(r(os.setxattr, d + "/closed", ACCESS, acl(
        (USER_OBJ, 7), (USER, 7, NOBODY), (GROUP_OBJ, 0), (MASK, 7), (OTHER, 0))))
    out.append(as_nobody(lambda: opened(d + "/closed/mine", os.O_CREAT | os.O_WRONLY, 0o600)))
    out.append(owner(d + "/closed/mine"))
    out.append(r(os.getxattr, f, ACCESS).hex())
    return out


def acl_defaults_inherited(d):
    top = d + "/top"
    os.mkdir(top, 0o755)
    default = acl((USER_OBJ, 7), (USER, 7, NOBODY), (GROUP_OBJ, 5), (MASK, 7), (OTHER, 0))
    out = [r(os.setxattr, top, DEFAULT, default)]
    # The umask does not apply under a default ACL; the mode masks the
    # inherited entries.
    old = os.umask(0o077)
    write(top + "/f", m=0o666)
    os.mkdir(top + "/sub", 0o777)
    os.mkfifo(top + "/fifo", 0o640)
    os.symlink("f", top + "/link")
    os.umask(old)
    for p in ("f", "sub", "fifo"):
        q = top + "/" + p
        out += [p, mode(q), r(os.getxattr, q, ACCESS), r(os.getxattr, q, DEFAULT)]
    out.append(mode(top + "/link"))
    # Two levels down, by way of the subdirectory's inherited default.
    write(top + "/sub/g", m=0o640)
    out += [mode(top + "/sub/g"), r(os.getxattr, top + "/sub/g", ACCESS)]
    # Nobody writes through its named entry, and makes files there.
    out.append(can(top + "/f", os.O_WRONLY))
    out.append(as_nobody(lambda: opened(top + "/sub/theirs", os.O_CREAT | os.O_WRONLY, 0o644)))
    out.append(mode(top + "/sub/theirs"))
    # A minimal default ACL: bits alone, and no access ACL.
    os.mkdir(d + "/plain", 0o755)
    out.append(r(os.setxattr, d + "/plain", DEFAULT, acl((USER_OBJ, 7), (GROUP_OBJ, 0), (OTHER, 0))))
    write(d + "/plain/f", m=0o666)
    out += [mode(d + "/plain/f"), sorted(os.listxattr(d + "/plain/f"))]
    # Without a default ACL the umask applies, to every kind.
    old = os.umask(0o027)
    write(d + "/masked", m=0o666)
    os.mkdir(d + "/maskeddir", 0o777)
    os.mkfifo(d + "/maskedfifo", 0o666)
    os.umask(old)
    out += [mode(d + "/masked"), mode(d + "/maskeddir"), mode(d + "/maskedfifo")]
    # Removing the default stops the inheritance.
    out.append(r(os.removexattr, top, DEFAULT))
    write(top + "/after", m=0o666)
    out += [mode(top + "/after"), sorted(os.listxattr(top + "/after"))]
    return out


def acl_chmod_and_minimal_acls(d):
    f = d + "/f"
    write(f)
    os.chmod(f, 0o644)
    os.setxattr(f, ACCESS, acl((USER_OBJ, 6), (USER, 6, NOBODY), (GROUP_OBJ, 4), (MASK, 6), (OTHER, 0)))
    out = [mode(f), can(f, os.O_WRONLY)]
    # chmod sets the mask (not the owning group's entry) and the others'.
    os.chmod(f, 0o604)
    out += [mode(f), r(os.getxattr, f, ACCESS).hex(), can(f, os.O_WRONLY), can(f, os.O_RDONLY)]
    os.chmod(f, 0o674)
    out += [mode(f), can(f, os.O_WRONLY)]
    # An ACL the bits say in full is not kept as an ACL.
    out.append(r(os.setxattr, f, ACCESS, acl((USER_OBJ, 7), (GROUP_OBJ, 5), (OTHER, 1))))
    out += [mode(f), sorted(os.listxattr(f)), r(os.getxattr, f, ACCESS)]
    # Removing an access ACL leaves the bits.
    os.setxattr(f, ACCESS, acl((USER_OBJ, 6), (USER, 6, NOBODY), (GROUP_OBJ, 4), (MASK, 6), (OTHER, 0)))
    out += [r(os.removexattr, f, ACCESS), mode(f), sorted(os.listxattr(f))]
    return out


def acl_values_checked(d):
    f = d + "/f"
    write(f)
    os.mkdir(d + "/dir")
    os.symlink("f", d + "/l")
    good = acl((USER_OBJ, 6), (GROUP_OBJ, 4), (OTHER, 4))
    bad_version = (1).to_bytes(4, "little") + good[4:]
    return [
        r(os.setxattr, f, ACCESS, good[:-1]),
        r(os.setxattr, f, ACCESS, b"\x02\x00"),
        r(os.setxattr, f, ACCESS, bad_version),
        r(os.setxattr, f, ACCESS, acl((USER_OBJ, 6), (OTHER, 4))),
        r(os.setxattr, f, ACCESS, acl((USER_OBJ, 6), (USER, 6, NOBODY), (GROUP_OBJ, 4), (OTHER, 4))),
        r(os.setxattr, f, ACCESS, acl((USER_OBJ, 6), (GROUP_OBJ, 4), (OTHER, 4), (MASK, 4))),
        r(os.setxattr, f, ACCESS, acl((USER_OBJ, 8), (GROUP_OBJ, 4), (OTHER, 4))),
        r(os.setxattr, f, ACCESS, acl((USER_OBJ, 6), (0x40, 4), (GROUP_OBJ, 4), (OTHER, 4))),
        r(os.setxattr, f, DEFAULT, good),
        r(os.setxattr, d + "/dir", DEFAULT, good),
        r(os.setxattr, d + "/l", ACCESS, good, follow_symlinks=False),
        r(os.getxattr, d + "/l", ACCESS, follow_symlinks=False),
        # Removing an ACL that is not there is no error, as a default one of
        # a file is not.
        r(os.removexattr, f, ACCESS),
        r(os.removexattr, f, DEFAULT),
        sorted(os.listxattr(f)),
        mode(f),
    ]


def acl_set_by_an_outsider_clears_setgid(d):
    """An access ACL set by its owner from outside the file's group (and
    without CAP_FSETID) takes set-group-id away, with or without named
    entries (posix_acl_update_mode); from inside the group it stays; a
    default ACL changes no bits."""
    named = acl((USER_OBJ, 7), (USER, 5, 0), (GROUP_OBJ, 5), (MASK, 5), (OTHER, 5))
    minimal = acl((USER_OBJ, 7), (GROUP_OBJ, 5), (OTHER, 1))
    paths = {n: d + "/" + n for n in ("outside", "outside_minimal", "ingroup")}
    for n, p in paths.items():
        write(p)
        os.chown(p, NOBODY, NOBODY if n == "ingroup" else GROUP)
    paths["dir"] = d + "/dir"
    os.mkdir(paths["dir"])
    os.chown(paths["dir"], NOBODY, GROUP)
    # After the chowns, which would take the bit away.
    for p in paths.values():
        os.chmod(p, 0o2775)
    out = as_nobody(lambda: [
        r(os.setxattr, paths["outside"], ACCESS, named),
        r(os.setxattr, paths["outside_minimal"], ACCESS, minimal),
        r(os.setxattr, paths["ingroup"], ACCESS, named),
        r(os.setxattr, paths["dir"], DEFAULT, named),
    ])
    out += [(n, mode(p)) for n, p in sorted(paths.items())]
    return out


def removed_directory_still_open(d):
    """xfstests generic/035: a directory removed while open (or the working
    directory) has no link, lists nothing and takes no new entry."""
    os.mkdir(d + "/r")
    fd = os.open(d + "/r", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.rmdir(d + "/r")
        st = r(os.fstat, fd)
        out = [st if isinstance(st, str) else (st.st_nlink, stat.S_ISDIR(st.st_mode))]
        out.append(r(os.listdir, fd))
        out.append(r(lambda: os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))))
        out.append(r(lambda: os.mkdir("s", dir_fd=fd)))
        here = os.getcwd()
        os.fchdir(fd)
        try:
            out.append(r(lambda: os.stat(".").st_nlink))
        finally:
            os.chdir(here)
    finally:
        os.close(fd)
    return out


def listing_while_renaming_away_and_back(d):
    """xfstests generic/736: renaming each entry away and back while the
    directory is read sees each name once (ext4: 3,000 of 3,000)."""
    top = d + "/many"
    os.mkdir(top)
    for i in range(3000):
        os.close(os.open("%s/f%d" % (top, i), os.O_CREAT | os.O_WRONLY, 0o644))
    seen = []
    with os.scandir(top) as it:
        for e in it:
            os.rename(top + "/" + e.name, top + "/T")
            os.rename(top + "/T", top + "/" + e.name)
            seen.append(e.name)
            if len(seen) > 9000:
                break
    return [len(seen), len(set(seen))]


def directory_links(d):
    os.mkdir(d + "/a")
    os.mkdir(d + "/a/b")
    os.mkdir(d + "/a/c")
    write(d + "/a/f")
    out = [os.lstat(d + "/a").st_nlink, os.lstat(d + "/a/b").st_nlink]
    os.rename(d + "/a/c", d + "/c")
    out += [os.lstat(d + "/a").st_nlink, os.lstat(d).st_nlink]
    os.rmdir(d + "/a/b")
    out.append(os.lstat(d + "/a").st_nlink)
    out.append(sorted(os.listdir(d + "/a")))
    return out


class FileHandle(ctypes.Structure):
    """struct file_handle with room for any handle (MAX_HANDLE_SZ 128)."""
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int),
                ("f_handle", ctypes.c_ubyte * 128)]


def name_to_handle(path):
    h = FileHandle(128, 0)
    mount_id = ctypes.c_int()
    check(libc.name_to_handle_at(AT_FDCWD, os.fsencode(path), ctypes.byref(h),
                                 ctypes.byref(mount_id), 0))
    return h


def open_by_handle(mount_fd, h, flags):
    fd = libc.open_by_handle_at(mount_fd, ctypes.byref(h), flags)
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return fd


def drop_caches():
    """Pushes every unused inode and dentry out of the kernel's caches."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")


def file_handles_after_the_kernel_forgets(d):
    """xfstests generic/426, 467: name_to_handle_at, then drop the caches,
    then open_by_handle_at opens the same file or directory (a directory
    handle is reconnected to its path through ".."); a handle to a
    removed file is ESTALE."""
    os.makedirs(d + "/sub/deep")
    write(d + "/f", b"kept")
    write(d + "/sub/deep/g", b"inner")
    write(d + "/gone", b"x")
    names = ["f", "sub", "sub/deep", "sub/deep/g", "gone"]
    handles = {n: name_to_handle(d + "/" + n) for n in names}
    inos = {n: os.lstat(d + "/" + n).st_ino for n in names}
    os.unlink(d + "/gone")
    drop_caches()
    out = []
    mount_fd = os.open(os.path.dirname(d), os.O_RDONLY | os.O_DIRECTORY)
    try:
        for n in names:
            def opened_again():
                is_dir = n.startswith("sub") and not n.endswith("g")
                flags = os.O_RDONLY | (os.O_DIRECTORY if is_dir else 0)
                fd = open_by_handle(mount_fd, handles[n], flags)
                try:
                    same = os.fstat(fd).st_ino == inos[n]
                    got = sorted(os.listdir(fd)) if is_dir else os.pread(fd, 64, 0)
                    return [same, got]
                finally:
                    os.close(fd)
            out.append([n, r(opened_again)])
        # A directory's handle opens it by its path again: ".." from the
        # node id up to the root, then the name in each parent.
        def path_of_directory():
            fd = open_by_handle(mount_fd, handles["sub/deep"], os.O_RDONLY | os.O_DIRECTORY)
            try:
                return os.readlink("/proc/self/fd/%d" % fd) == d + "/sub/deep"
            finally:
                os.close(fd)
        out.append(r(path_of_directory))
    finally:
        os.close(mount_fd)
    return out


CASES = [
    open_flags,
    open_permissions,
    o_tmpfile,
    links,
    unlink_and_rmdir,
    sticky_directories,
    rename_rules,
    chmod_and_chown,
    setuid_cleared_on_write_and_truncate,
    setgid_directories,
    utimensat_rules,
    times_before_the_epoch,
    mknod_fifo_and_devices,
    symlink_loops,
    name_limits,
    truncate_rules,
    statfs_fields,
    xattrs,
    writes_take_file_capabilities_away,
    acl_named_entries_and_the_mask,
    acl_defaults_inherited,
    acl_chmod_and_minimal_acls,
    acl_values_checked,
    acl_set_by_an_outsider_clears_setgid,
    directory_links,
    listing_while_renaming_away_and_back,
    removed_directory_still_open,
    file_handles_after_the_kernel_forgets,
]


def run(case, root):
    d = os.path.join(root, case.__name__)
    os.mkdir(d)
    os.chmod(d, 0o777)
    try:
        return case(d)
    except Exception as e:  # a case that crashes is a result too
        return "raised %r" % e


def main():
    mount, tmpfs = sys.argv[1], sys.argv[2]
    cases = [c for c in CASES if not sys.argv[3:] or c.__name__ in sys.argv[3:]]
    os.umask(0o022)
    for top in (mount, tmpfs):
        os.chmod(top, 0o755)
    differ = {}
    for case in cases:
        got_mount = run(case, mount)
        got_tmpfs = run(case, tmpfs)
        if got_mount != got_tmpfs:
            differ[case.__name__] = (got_mount, got_tmpfs)
    print("differences from tmpfs (%d of %d cases):" % (len(differ), len(cases)))
    for name, (m, t) in differ.items():
        why = EXPECTED_GAPS.get(name, "NOT EXPECTED")
        print("  %s (%s)\n    pollfs: %s\n    tmpfs:  %s" % (name, why, m, t))
    passed = failed = 0
    for case in cases:
        name = case.__name__
        if name in differ and name not in EXPECTED_GAPS:
            print("FAIL: %s differs from tmpfs" % name)
            failed += 1
        elif name in EXPECTED_GAPS and name not in differ:
            print("FAIL: %s is listed as a gap but now agrees with tmpfs: take it off EXPECTED_GAPS" % name)
            failed += 1
        else:
            passed += 1
    print("conformance: %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
