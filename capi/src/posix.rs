//! The caller's credentials and the POSIX calls on paths: symbolic and
//! hard links, chmod, chown, times and extended attributes. Each checks
//! what the handle's credentials may do through the engine's POSIX layer
//! (`pollfs_core::fs::posix`), the same rules the mount's requests go
//! through. Every function here is thread-safe.

use core::ffi::{c_char, c_int, c_void};
use std::time::{SystemTime, UNIX_EPOCH};

use pollfs_core::dev::BlockDevice;
use pollfs_core::fs::posix::{Creds, Want};
use pollfs_core::{Fs, InodeId, XattrMode};

use crate::error::{int, size, Fail};
use crate::fs::{at_path, changing, fs_creds, PollfsFs};
use crate::raw;

/// `pollfs_utimens`: set this time to now.
pub const POLLFS_UTIME_NOW: i64 = i64::MAX;
/// `pollfs_utimens`: leave this time as it is.
pub const POLLFS_UTIME_OMIT: i64 = i64::MAX - 1;

/// `pollfs_chown`: leave the owner (or group) as it is.
pub const POLLFS_ID_KEEP: u32 = u32::MAX;

/// The process's effective user and group and its supplementary groups,
/// with no umask: what a new handle's calls run as.
pub(crate) fn process_creds() -> Creds {
    // SAFETY: geteuid and getegid cannot fail and touch no memory of ours.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    Creds {
        groups: supplementary_groups(),
        ..Creds::new(uid, gid)
    }
}

/// getgroups(2); none if it fails (the checks then use the effective
/// group alone: less access, never more).
fn supplementary_groups() -> Vec<u32> {
    // SAFETY: a count of 0 asks for the number only; nothing is written.
    let n = unsafe { libc::getgroups(0, core::ptr::null_mut()) };
    let Ok(len) = usize::try_from(n) else {
        return Vec::new();
    };
    let mut groups: Vec<libc::gid_t> = vec![0; len];
    // SAFETY: `groups` has room for `n` ids, the count passed.
    let got = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    match usize::try_from(got) {
        Ok(got) => {
            groups.truncate(got);
            groups
        }
        Err(_) => Vec::new(),
    }
}

/// Sets whose calls the handle's later calls are: the user and group that
/// own what they create and that every access is checked for, `ngroups`
/// supplementary groups at `groups`, and the umask applied to the mode of
/// what they create where its directory has no default ACL (`umask &
/// 0777`). A handle starts with the process's effective ids and groups
/// and no umask. Root (uid 0) passes every check but executing what no
/// one may execute; no other capability is known. Calls already running
/// keep the credentials they started with; files opened before keep
/// theirs for what a write takes away. Thread-safe.
///
/// # Safety
/// `fs` is a live handle; `groups` points at `ngroups` ids (any pointer
/// when `ngroups` is 0).
#[no_mangle]
pub unsafe extern "C" fn pollfs_set_creds(
    fs: *const PollfsFs,
    uid: u32,
    gid: u32,
    groups: *const u32,
    ngroups: usize,
    umask: u32,
) -> c_int {
    int("pollfs_set_creds", || {
        // SAFETY: the caller's contract.
        let handle = unsafe { raw::obj(fs, "the filesystem") }?;
        // SAFETY: the caller's contract.
        let groups = unsafe { raw::slice(groups, ngroups) }?.to_vec();
        let umask = u16::try_from(umask & 0o777).unwrap_or(0);
        handle.set_creds(Creds {
            umask,
            groups,
            ..Creds::new(uid, gid)
        });
        Ok(0)
    })
}

/// Makes `linkpath` a symbolic link to `target` (stored as given, never
/// followed by pollfs), owned by the handle's user. Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `target` and `linkpath` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn pollfs_symlink(
    fs: *const PollfsFs,
    target: *const c_char,
    linkpath: *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    let target = unsafe { raw::str(target, "the target") };
    // SAFETY: the caller's contract, passed on.
    unsafe {
        at_path("pollfs_symlink", fs, linkpath, |fs, who, p| {
            let target = target
                .as_deref()
                .map_err(|_| pollfs_core::Error::from(pollfs_core::error::NameError::BadByte))?;
            let (dir, name) = changing(fs, who, p)?;
            fs.symlink_by(dir, name, target, who).map(|_| ())
        })
    }
}

/// Makes `newpath` a new name for the file or symbolic link `oldpath` (not
/// a directory: `-EPERM`). Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `oldpath` and `newpath` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn pollfs_link(
    fs: *const PollfsFs,
    oldpath: *const c_char,
    newpath: *const c_char,
) -> c_int {
    int("pollfs_link", || {
        // SAFETY: the caller's contract.
        let (fs, who) = unsafe { fs_creds(fs) }?;
        // SAFETY: the caller's contract.
        let old = unsafe { raw::str(oldpath, "the old path") }?;
        // SAFETY: the caller's contract.
        let new = unsafe { raw::str(newpath, "the new path") }?;
        let linked = fs.lookup_by(old, &who).and_then(|ino| {
            let (dir, name) = changing(&fs, &who, new)?;
            fs.link_in(ino, dir, name)
        });
        linked.map_err(|e| Fail::about(&format!("{old} -> {new}"), &e))?;
        Ok(0)
    })
}

/// Copies the target of the symbolic link `path` into `buf` (at most
/// `size` bytes, no NUL added, as readlink(2)); returns the bytes copied
/// or a negative errno (`-EINVAL` if `path` is not a symbolic link).
/// Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string, `buf` has
/// `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn pollfs_readlink(
    fs: *const PollfsFs,
    path: *const c_char,
    buf: *mut c_char,
    size_: usize,
) -> isize {
    size("pollfs_readlink", || {
        // SAFETY: the caller's contract.
        let (fs, who) = unsafe { fs_creds(fs) }?;
        // SAFETY: the caller's contract.
        let path = unsafe { raw::str(path, "the path") }?;
        // SAFETY: the caller's contract.
        let buf = unsafe { raw::bytes_mut(buf.cast::<c_void>(), size_) }?;
        let target = fs
            .lookup_by(path, &who)
            .and_then(|ino| fs.readlink(ino))
            .map_err(|e| Fail::about(path, &e))?;
        let n = target.len().min(buf.len());
        buf[..n].copy_from_slice(&target.as_bytes()[..n]);
        Ok(i64::try_from(n).unwrap_or(i64::MAX))
    })
}

/// Sets the permission bits of `path` to `mode & 07777`: only its owner or
/// root may (`-EPERM`); set-group-ID goes if the caller is neither in the
/// file's group nor root; its access ACL follows. Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pollfs_chmod(
    fs: *const PollfsFs,
    path: *const c_char,
    mode: u32,
) -> c_int {
    let perm = u16::try_from(mode & 0o7777).unwrap_or(0);
    // SAFETY: the caller's contract, passed on.
    unsafe {
        at_path("pollfs_chmod", fs, path, |fs, who, p| {
            fs.chmod_by(fs.lookup_by(p, who)?, perm, who).map(|_| ())
        })
    }
}

/// Changes the owner and group of `path` (`POLLFS_ID_KEEP` keeps one):
/// root may give it to anyone; its owner may only change its group, to
/// one of the owner's groups (`-EPERM` otherwise). Set-user-ID goes, and
/// set-group-ID where the group may execute or the caller is neither in
/// the group nor root (not from a directory). Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pollfs_chown(
    fs: *const PollfsFs,
    path: *const c_char,
    uid: u32,
    gid: u32,
) -> c_int {
    let keep = |id: u32| (id != POLLFS_ID_KEEP).then_some(id);
    // SAFETY: the caller's contract, passed on.
    unsafe {
        at_path("pollfs_chown", fs, path, |fs, who, p| {
            let ino = fs.lookup_by(p, who)?;
            fs.chown_by(ino, keep(uid), keep(gid), who).map(|_| ())
        })
    }
}

/// Nanoseconds since the Unix epoch now, as the engine keeps times.
fn now_ns() -> u64 {
    let ns = match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    };
    ns as u64
}

/// Sets the access and modification times of `path`, in nanoseconds since
/// the Unix epoch (negative before 1970), as utimensat(2):
/// `POLLFS_UTIME_NOW` sets one to now, `POLLFS_UTIME_OMIT` leaves it.
/// Times other than now only by the owner or root (`-EPERM`); now also by
/// a caller who may write the file (`-EACCES`). Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pollfs_utimens(
    fs: *const PollfsFs,
    path: *const c_char,
    atime_ns: i64,
    mtime_ns: i64,
) -> c_int {
    let now = now_ns();
    // The engine's times are two's-complement nanoseconds in a u64.
    let time = |t: i64| match t {
        POLLFS_UTIME_NOW => Some(now),
        POLLFS_UTIME_OMIT => None,
        t => Some(t as u64),
    };
    let explicit = [atime_ns, mtime_ns]
        .iter()
        .any(|t| *t != POLLFS_UTIME_NOW && *t != POLLFS_UTIME_OMIT);
    let (atime, mtime) = (time(atime_ns), time(mtime_ns));
    // SAFETY: the caller's contract, passed on.
    unsafe {
        at_path("pollfs_utimens", fs, path, |fs, who, p| {
            let ino = fs.lookup_by(p, who)?;
            if atime.is_none() && mtime.is_none() {
                return Ok(());
            }
            fs.set_times_by(ino, atime, mtime, explicit, who)
                .map(|_| ())
        })
    }
}

/// A get or list's answer: the length alone for a `size` of 0, else the
/// bytes copied into `buf`, or `-ERANGE` if they do not fit.
fn sized(bytes: &[u8], buf: &mut [u8]) -> Result<i64, Fail> {
    let len = i64::try_from(bytes.len()).unwrap_or(i64::MAX);
    if buf.is_empty() {
        return Ok(len);
    }
    let Some(dst) = buf.get_mut(..bytes.len()) else {
        return Err(Fail::new(libc::ERANGE, "the buffer is too small"));
    };
    dst.copy_from_slice(bytes);
    Ok(len)
}

/// A path's inode for an extended-attribute call, checked: the way there
/// searched, and `name` readable (`write` false) or changeable.
fn xattr_target<D: BlockDevice>(
    fs: &Fs<D>,
    who: &Creds,
    path: &str,
    name: &str,
    write: bool,
) -> pollfs_core::Result<InodeId> {
    let ino = fs.lookup_by(path, who)?;
    fs.check_xattr_by(ino, name, write, who)?;
    Ok(ino)
}

/// Copies the value of extended attribute `name` of `path` into `value`;
/// with `size` 0 returns its length only; `-ERANGE` if it does not fit,
/// `-ENODATA` if there is none. `trusted.` names only for root; `user.`
/// and `security.` need read permission; ACLs anyone may read.
/// Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` and `name` NUL-terminated strings,
/// `value` has `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn pollfs_getxattr(
    fs: *const PollfsFs,
    path: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size_: usize,
) -> isize {
    size("pollfs_getxattr", || {
        // SAFETY: the caller's contract.
        let (fs, who) = unsafe { fs_creds(fs) }?;
        // SAFETY: the caller's contract.
        let path = unsafe { raw::str(path, "the path") }?;
        // SAFETY: the caller's contract.
        let name = unsafe { raw::str(name, "the name") }?;
        // SAFETY: the caller's contract.
        let buf = unsafe { raw::bytes_mut(value, size_) }?;
        let v = xattr_target(&fs, &who, path, name, false)
            .and_then(|ino| fs.posix_getxattr(ino, name))
            .map_err(|e| Fail::about(path, &e))?;
        sized(&v, buf)
    })
}

/// Sets extended attribute `name` of `path` to the `size` bytes at
/// `value`. `flags`: 0, `XATTR_CREATE` (`-EEXIST` if it exists) or
/// `XATTR_REPLACE` (`-ENODATA` if not). `system.posix_acl_access` and
/// `system.posix_acl_default` are checked as Linux checks them and keep
/// the permission bits in step; only the owner or root may set them.
/// Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` and `name` NUL-terminated strings,
/// `value` has `size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn pollfs_setxattr(
    fs: *const PollfsFs,
    path: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size_: usize,
    flags: c_int,
) -> c_int {
    int("pollfs_setxattr", || {
        let mode = match flags {
            0 => XattrMode::Any,
            libc::XATTR_CREATE => XattrMode::Create,
            libc::XATTR_REPLACE => XattrMode::Replace,
            other => return Err(Fail::inval(format!("flags {other:#x}"))),
        };
        // SAFETY: the caller's contract.
        let (fs, who) = unsafe { fs_creds(fs) }?;
        // SAFETY: the caller's contract.
        let path = unsafe { raw::str(path, "the path") }?;
        // SAFETY: the caller's contract.
        let name = unsafe { raw::str(name, "the name") }?;
        // SAFETY: the caller's contract.
        let value = unsafe { raw::bytes(value, size_) }?;
        xattr_target(&fs, &who, path, name, true)
            .and_then(|ino| {
                let kill_sgid = !who.keeps_sgid(fs.attr(ino)?.gid);
                fs.posix_setxattr(ino, name, value, mode, kill_sgid)
            })
            .map_err(|e| Fail::about(path, &e))?;
        Ok(0)
    })
}

/// Copies the names of `path`'s extended attributes into `list`, each
/// ended by a NUL; with `size` 0 returns the length only; `-ERANGE` if
/// they do not fit. `trusted.` names are listed for root only.
/// Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string, `list` has
/// `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn pollfs_listxattr(
    fs: *const PollfsFs,
    path: *const c_char,
    list: *mut c_char,
    size_: usize,
) -> isize {
    size("pollfs_listxattr", || {
        // SAFETY: the caller's contract.
        let (fs, who) = unsafe { fs_creds(fs) }?;
        // SAFETY: the caller's contract.
        let path = unsafe { raw::str(path, "the path") }?;
        // SAFETY: the caller's contract.
        let buf = unsafe { raw::bytes_mut(list.cast::<c_void>(), size_) }?;
        let names = fs
            .lookup_by(path, &who)
            .and_then(|ino| fs.list_xattr(ino))
            .map_err(|e| Fail::about(path, &e))?;
        let mut out = Vec::new();
        for n in names {
            if n.starts_with("trusted.") && !who.is_root() {
                continue;
            }
            out.extend_from_slice(n.as_bytes());
            out.push(0);
        }
        sized(&out, buf)
    })
}

/// Removes extended attribute `name` of `path` (`-ENODATA` if there is
/// none; removing an ACL that is not there is no error). Who may: as
/// `pollfs_setxattr`. Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` and `name` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn pollfs_removexattr(
    fs: *const PollfsFs,
    path: *const c_char,
    name: *const c_char,
) -> c_int {
    int("pollfs_removexattr", || {
        // SAFETY: the caller's contract.
        let (fs, who) = unsafe { fs_creds(fs) }?;
        // SAFETY: the caller's contract.
        let path = unsafe { raw::str(path, "the path") }?;
        // SAFETY: the caller's contract.
        let name = unsafe { raw::str(name, "the name") }?;
        xattr_target(&fs, &who, path, name, true)
            .and_then(|ino| fs.posix_removexattr(ino, name))
            .map_err(|e| Fail::about(path, &e))?;
        Ok(0)
    })
}

/// `access(2)` for the handle's credentials: 0 if they may do `mode`
/// (`R_OK`, `W_OK`, `X_OK` or'd, or `F_OK`) to `path`, else `-EACCES`.
/// Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pollfs_access(
    fs: *const PollfsFs,
    path: *const c_char,
    mode: c_int,
) -> c_int {
    let want = Want::from_bits(u16::try_from(mode & 7).unwrap_or(0));
    // SAFETY: the caller's contract, passed on.
    unsafe {
        at_path("pollfs_access", fs, path, |fs, who, p| {
            fs.check_access(fs.lookup_by(p, who)?, who, want)
                .map(|_| ())
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use core::ffi::CStr;
    use std::sync::{Arc, Barrier};

    use super::*;
    use crate::fs::PollfsStat;
    use crate::fs::{pollfs_format, pollfs_mkdir, pollfs_open, pollfs_stat, pollfs_unmount};
    use crate::{pollfs_close, pollfs_pwrite, PollfsFile};

    /// A handle on a new filesystem in memory.
    struct Handle(*mut PollfsFs);

    // SAFETY: a `PollfsFs` is thread-safe (its calls may come from any
    // thread at once); the pointer is only passed to its calls.
    unsafe impl Send for Handle {}
    // SAFETY: as above.
    unsafe impl Sync for Handle {}

    impl Handle {
        fn new() -> Handle {
            let mut out = core::ptr::null_mut();
            // SAFETY: a C string, no options, `out` writable.
            let r = unsafe { pollfs_format(c"ram".as_ptr(), core::ptr::null(), &mut out) };
            assert_eq!(r, 0);
            Handle(out)
        }

        fn as_user(&self, uid: u32, gid: u32, umask: u32) {
            // SAFETY: a live handle, no groups.
            let r = unsafe { pollfs_set_creds(self.0, uid, gid, core::ptr::null(), 0, umask) };
            assert_eq!(r, 0);
        }

        fn stat(&self, path: &CStr) -> PollfsStat {
            let mut st = PollfsStat::default();
            // SAFETY: a live handle, a C string, `st` writable.
            assert_eq!(unsafe { pollfs_stat(self.0, path.as_ptr(), &mut st) }, 0);
            st
        }

        /// `pollfs_open`'s result; the file closed again.
        fn open(&self, path: &CStr, flags: c_int, mode: u32) -> c_int {
            let mut f: *mut PollfsFile = core::ptr::null_mut();
            // SAFETY: a live handle, a C string, `f` writable.
            let r = unsafe { pollfs_open(self.0, path.as_ptr(), flags, mode, &mut f) };
            if r == 0 {
                // SAFETY: the handle just opened, not used again.
                assert_eq!(unsafe { pollfs_close(f) }, 0);
            }
            r
        }
    }

    impl Drop for Handle {
        fn drop(&mut self) {
            // SAFETY: the live handle, given up.
            unsafe { pollfs_unmount(self.0) };
        }
    }

    const CREATE: c_int = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR;

    #[test]
    fn a_set_group_id_directory_gives_its_group_through_the_c_api() {
        let h = Handle::new();
        h.as_user(0, 0, 0);
        // SAFETY: a live handle and C strings, here and below.
        unsafe {
            assert_eq!(pollfs_mkdir(h.0, c"/sg".as_ptr(), 0o777), 0);
            assert_eq!(pollfs_chown(h.0, c"/sg".as_ptr(), POLLFS_ID_KEEP, 50), 0);
            assert_eq!(pollfs_chmod(h.0, c"/sg".as_ptr(), 0o2777), 0);
        }
        h.as_user(1000, 100, 0o022);
        assert_eq!(h.open(c"/sg/f", CREATE, 0o666), 0);
        let f = h.stat(c"/sg/f");
        assert_eq!((f.uid, f.gid, f.mode & 0o7777), (1000, 50, 0o644));
        // SAFETY: as above.
        assert_eq!(unsafe { pollfs_mkdir(h.0, c"/sg/d".as_ptr(), 0o777) }, 0);
        let d = h.stat(c"/sg/d");
        assert_eq!((d.gid, d.mode & 0o7777), (50, 0o2755));
    }

    #[test]
    fn a_default_acl_is_inherited_through_the_c_api() {
        let h = Handle::new();
        h.as_user(0, 0, 0);
        let mut default = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in [
            (1u16, 7u16, u32::MAX),
            (2, 7, 1000),
            (4, 5, u32::MAX),
            (0x10, 7, u32::MAX),
            (0x20, 5, u32::MAX),
        ] {
            default.extend_from_slice(&tag.to_le_bytes());
            default.extend_from_slice(&perm.to_le_bytes());
            default.extend_from_slice(&id.to_le_bytes());
        }
        // SAFETY: a live handle, C strings, a value of its length.
        unsafe {
            assert_eq!(pollfs_mkdir(h.0, c"/d".as_ptr(), 0o777), 0);
            let r = pollfs_setxattr(
                h.0,
                c"/d".as_ptr(),
                c"system.posix_acl_default".as_ptr(),
                default.as_ptr().cast(),
                default.len(),
                0,
            );
            assert_eq!(r, 0);
        }
        h.as_user(1000, 100, 0o077);
        assert_eq!(h.open(c"/d/f", CREATE, 0o666), 0);
        assert_eq!(
            h.stat(c"/d/f").mode & 0o7777,
            0o664,
            "the mask, not the umask"
        );
        let mut got = [0u8; 64];
        // SAFETY: a live handle, C strings, a buffer of its length.
        let n = unsafe {
            pollfs_getxattr(
                h.0,
                c"/d/f".as_ptr(),
                c"system.posix_acl_access".as_ptr(),
                got.as_mut_ptr().cast(),
                got.len(),
            )
        };
        assert_eq!(n, 44);
        // The named user's entry came along.
        assert_eq!(&got[12..20], &[2, 0, 7, 0, 0xe8, 3, 0, 0]);
    }

    #[test]
    fn chmod_by_a_non_owner_and_writes_without_permission_are_refused() {
        let h = Handle::new();
        h.as_user(1000, 100, 0);
        assert_eq!(h.open(c"/f", CREATE, 0o644), -libc::EACCES, "/ is root's");
        h.as_user(0, 0, 0);
        assert_eq!(h.open(c"/f", CREATE, 0o644), 0);
        h.as_user(1000, 100, 0);
        // SAFETY: a live handle and C strings.
        unsafe {
            assert_eq!(pollfs_chmod(h.0, c"/f".as_ptr(), 0o777), -libc::EPERM);
            assert_eq!(pollfs_chown(h.0, c"/f".as_ptr(), 1000, 100), -libc::EPERM);
        }
        assert_eq!(h.open(c"/f", libc::O_RDWR, 0), -libc::EACCES);
        let mut f: *mut PollfsFile = core::ptr::null_mut();
        // SAFETY: a live handle, a C string, `f` writable; then the file.
        unsafe {
            assert_eq!(
                pollfs_open(h.0, c"/f".as_ptr(), libc::O_RDONLY, 0, &mut f),
                0
            );
            assert_eq!(
                pollfs_pwrite(f, b"x".as_ptr().cast(), 1, 0),
                -(libc::EBADF as isize)
            );
            assert_eq!(pollfs_close(f), 0);
        }
    }

    #[test]
    fn chown_takes_set_id_bits_through_the_c_api() {
        let h = Handle::new();
        h.as_user(0, 0, 0);
        assert_eq!(h.open(c"/f", CREATE, 0o6755), 0);
        // SAFETY: a live handle and C strings.
        unsafe {
            assert_eq!(pollfs_chown(h.0, c"/f".as_ptr(), 7, 8), 0);
        }
        let st = h.stat(c"/f");
        assert_eq!((st.uid, st.gid, st.mode & 0o7777), (7, 8, 0o755));
    }

    #[test]
    fn two_threads_creating_one_name_through_the_c_api() {
        let h = Arc::new(Handle::new());
        h.as_user(0, 0, 0);
        for round in 0..50 {
            let path = std::ffi::CString::new(format!("/r{round}")).unwrap();
            let go = Arc::new(Barrier::new(2));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (h, go, path) = (h.clone(), go.clone(), path.clone());
                    std::thread::spawn(move || {
                        go.wait();
                        h.open(&path, CREATE, 0o600)
                    })
                })
                .collect();
            let mut got: Vec<c_int> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            got.sort_unstable();
            assert_eq!(got, [-libc::EEXIST, 0], "round {round}");
        }
    }
}
