//! Mounting and formatting, and the namespace: open, create, remove,
//! rename, directories, attributes. Every function here is thread-safe:
//! one `PollfsFs` may be used from any number of threads at once.

use core::ffi::{c_char, c_int};
use std::sync::{PoisonError, RwLock};

use pollfs_core::dev::BlockDevice;
use pollfs_core::fs::posix::{Creds, Want};
use pollfs_core::fs::{Kind, Metadata};
use pollfs_core::{Created, File, Fs, InodeId};

use crate::device::{self, Dev, Opening};
use crate::error::{int, Fail};
use crate::file::PollfsFile;
use crate::poison::{Held, Poison};
use crate::{hook, posix, raw};

/// A mounted filesystem. Thread-safe. A call that panics inside the
/// library (a bug: the call returns `-EIO`) poisons the handle it was
/// working on, as a poisoned mutex: every later call on that handle fails
/// with `-ENOTRECOVERABLE`, and `pollfs_unmount` frees it without syncing
/// (as a crash would: the next mount recovers what was durable).
#[derive(Debug)]
pub struct PollfsFs {
    pub(crate) fs: Fs<Dev>,
    /// Whose calls these are: what every access is checked for and new
    /// inodes are owned by (`pollfs_set_creds`; the process's effective
    /// ids and groups until then).
    creds: RwLock<Creds>,
    /// Set by a panic in a call on this handle (`crate::poison`).
    poison: Poison,
}

impl PollfsFs {
    pub(crate) fn new(fs: Fs<Dev>) -> PollfsFs {
        PollfsFs {
            fs,
            creds: RwLock::new(posix::process_creds()),
            poison: Poison::default(),
        }
    }

    /// The credentials calls run with now.
    pub(crate) fn creds(&self) -> Creds {
        // A panic while the lock was held left whole credentials (the
        // writer replaces them in one store): the value is good.
        self.creds
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the credentials.
    pub(crate) fn set_creds(&self, creds: Creds) {
        *self.creds.write().unwrap_or_else(PoisonError::into_inner) = creds;
    }
}

/// Mount settings. A NULL pointer means every default.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PollfsOptions {
    /// Page-cache capacity in 4 KiB pages; 0 means 16384 (64 MiB).
    pub cache_pages: u32,
    /// `pollfs_format` only: non-zero to format a device that holds
    /// something (a filesystem, a partition table, data); without it such a
    /// device is refused with `-EEXIST`.
    pub force: u32,
    /// Size in bytes of a device in memory (`emu`, `ram`) and of a
    /// `file:` device `pollfs_format` makes; 0 means 256 MiB.
    pub size_bytes: u64,
}

const DEFAULT_CACHE_PAGES: u32 = 16384;

/// `S_IFREG`, `S_IFDIR`, `S_IFLNK`, `S_IFIFO`, `S_IFSOCK`, `S_IFCHR`,
/// `S_IFBLK`.
fn type_bits(kind: Kind) -> u32 {
    match kind {
        Kind::File => libc::S_IFREG,
        Kind::Dir => libc::S_IFDIR,
        Kind::Symlink => libc::S_IFLNK,
        Kind::Fifo => libc::S_IFIFO,
        Kind::Socket => libc::S_IFSOCK,
        Kind::CharDev => libc::S_IFCHR,
        Kind::BlockDev => libc::S_IFBLK,
    }
}

/// A file's attributes, as `pollfs_stat` and `pollfs_fstat` fill them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PollfsStat {
    /// Inode number.
    pub ino: u64,
    /// Type and permission bits, as `st_mode`.
    pub mode: u32,
    /// Links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// 4 KiB blocks mapped to the file.
    pub blocks: u64,
    /// Last access, nanoseconds since the Unix epoch (not updated by reads;
    /// read it as an `int64_t`: a time before 1970 is negative).
    pub atime_ns: u64,
    /// Last modification of the contents.
    pub mtime_ns: u64,
    /// Last change of the contents or attributes.
    pub ctime_ns: u64,
}

impl From<Metadata> for PollfsStat {
    fn from(m: Metadata) -> PollfsStat {
        PollfsStat {
            ino: m.ino.get(),
            mode: type_bits(m.kind) | u32::from(m.perm),
            nlink: m.nlink,
            uid: m.uid,
            gid: m.gid,
            size: m.len,
            blocks: m.blocks,
            atime_ns: m.atime,
            mtime_ns: m.mtime,
            ctime_ns: m.ctime,
        }
    }
}

/// Longest name in a directory, in bytes.
pub const POLLFS_NAME_MAX: usize = 255;
/// Bytes of `PollfsDirent::name`: the longest name and its NUL.
pub const POLLFS_NAME_BUF: usize = 256;

/// One directory entry, as `pollfs_readdir` fills it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PollfsDirent {
    /// Inode number.
    pub ino: u64,
    /// Type bits as in `st_mode` (`S_IFREG`, `S_IFDIR`, `S_IFLNK`).
    pub type_: u32,
    /// The name, NUL-terminated.
    pub name: [c_char; POLLFS_NAME_BUF],
}

/// Opens the device and mounts or formats it.
///
/// # Safety
/// As `pollfs_mount`, for `spec` and `options`.
unsafe fn mount_with(
    spec: *const c_char,
    options: *const PollfsOptions,
    format: bool,
) -> Result<Box<PollfsFs>, Fail> {
    // SAFETY: the caller's contract: `spec` is a C string.
    let spec = unsafe { raw::str(spec, "the device spec") }?;
    let o = if options.is_null() {
        PollfsOptions {
            cache_pages: 0,
            force: 0,
            size_bytes: 0,
        }
    } else {
        // SAFETY: the caller's contract: a valid options struct.
        *unsafe { raw::obj(options, "options") }?
    };
    let how = Opening {
        cache_pages: if o.cache_pages == 0 {
            DEFAULT_CACHE_PAGES
        } else {
            o.cache_pages
        },
        size: o.size_bytes,
        format,
        force: o.force != 0,
    };
    let fs = device::open_fs(spec, how)?;
    Ok(Box::new(PollfsFs::new(fs)))
}

/// Mounts the filesystem on the device `spec` names (recovering it after
/// a crash) and stores a handle in `*out`. A device in memory (`emu`,
/// `ram`) starts empty: it is formatted instead. Returns 0 or a negative errno.
/// Thread-safe.
///
/// # Safety
/// `spec` is a NUL-terminated string; `options` is NULL or points at a
/// `PollfsOptions`; `out` points at writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn pollfs_mount(
    spec: *const c_char,
    options: *const PollfsOptions,
    out: *mut *mut PollfsFs,
) -> c_int {
    int("pollfs_mount", || {
        // SAFETY: the caller's contract, passed on.
        let fs = unsafe { mount_with(spec, options, false) }?;
        // SAFETY: the caller's contract: `out` is writable.
        unsafe { raw::put(out, Box::into_raw(fs)) }?;
        Ok(0)
    })
}

/// Makes a new, empty filesystem on the device `spec` names (everything
/// on it is lost), mounts it and stores a handle in `*out`. Returns 0 or a
/// negative errno. Thread-safe.
///
/// # Safety
/// As `pollfs_mount`.
#[no_mangle]
pub unsafe extern "C" fn pollfs_format(
    spec: *const c_char,
    options: *const PollfsOptions,
    out: *mut *mut PollfsFs,
) -> c_int {
    int("pollfs_format", || {
        // SAFETY: the caller's contract, passed on.
        let fs = unsafe { mount_with(spec, options, true) }?;
        // SAFETY: the caller's contract: `out` is writable.
        unsafe { raw::put(out, Box::into_raw(fs)) }?;
        Ok(0)
    })
}

/// Syncs everything, writes a checkpoint and frees the handle (which is
/// freed even if the sync fails; a poisoned one is freed without a sync,
/// and `-ENOTRECOVERABLE` returned). Files still open keep working. Not
/// thread-safe: no other thread may be using `fs`.
///
/// # Safety
/// `fs` came from `pollfs_mount` or `pollfs_format` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn pollfs_unmount(fs: *mut PollfsFs) -> c_int {
    int("pollfs_unmount", || {
        // SAFETY: the caller's contract: a live handle of ours, given up.
        let fs = unsafe { raw::take(fs, "the filesystem") }?;
        if fs.poison.is_set() {
            // Syncing what a panic left half-changed could make it
            // durable: drop it instead, as a crash would.
            return Err(Fail::poisoned("the filesystem (freed, not synced)"));
        }
        fs.fs.unmount()?;
        Ok(0)
    })
}

/// The filesystem behind a handle, held for one call (a panic before it
/// is dropped poisons the handle); `-ENOTRECOVERABLE` if it is poisoned.
///
/// # Safety
/// `fs` is NULL or a live handle from `pollfs_mount`/`pollfs_format`.
pub(crate) unsafe fn fs_of<'a>(fs: *const PollfsFs) -> Result<Held<'a, Fs<Dev>>, Fail> {
    // SAFETY: the caller's contract.
    let handle = unsafe { raw::obj(fs, "the filesystem") }?;
    handle.poison.enter(&handle.fs, "the filesystem")
}

/// [`fs_of`] and the handle's credentials now.
///
/// # Safety
/// As [`fs_of`].
pub(crate) unsafe fn fs_creds<'a>(fs: *const PollfsFs) -> Result<(Held<'a, Fs<Dev>>, Creds), Fail> {
    // SAFETY: the caller's contract.
    let handle = unsafe { raw::obj(fs, "the filesystem") }?;
    let held = handle.poison.enter(&handle.fs, "the filesystem")?;
    Ok((held, handle.creds()))
}

/// Makes every file's data and every name change durable, in one commit.
/// Thread-safe.
///
/// # Safety
/// `fs` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn pollfs_sync(fs: *const PollfsFs) -> c_int {
    int("pollfs_sync", || {
        // SAFETY: the caller's contract.
        unsafe { fs_of(fs) }?.sync()?;
        Ok(0)
    })
}

/// Makes the entries of directory `path` durable, as fsync(2) of a
/// directory: a file created, removed or renamed before the call is
/// found (or gone) after a crash. Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pollfs_sync_dir(fs: *const PollfsFs, path: *const c_char) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        at_path("pollfs_sync_dir", fs, path, |fs, who, p| {
            fs.sync_dir(fs.lookup_by(p, who)?)
        })
    }
}

/// Opens the file at `path` (absolute or relative to the root; `/`
/// separated). `flags`: `O_RDONLY`, `O_WRONLY` or `O_RDWR` (checked
/// against the file's bits and access ACL for the handle's credentials:
/// `-EACCES`; a read or write the mode does not allow is `-EBADF`),
/// `O_CREAT` creates it if missing (search and write permission on its
/// directory), with `O_EXCL` fails with `-EEXIST` if it exists, `O_TRUNC`
/// empties it, `O_DIRECT` makes reads and writes bypass the cache
/// (offsets and lengths multiples of 4096, else `-EINVAL`). `mode`: the
/// permission bits (`mode & 07777`) of a file it creates, masked by the
/// directory's default ACL, which the file inherits, or else by the
/// handle's umask (0 unless set); the file is owned by the handle's user
/// and group (a set-group-ID directory's group), and keeps set-group-ID
/// only if the caller is in that group (or the group may not execute,
/// or the caller is root). A file is created with
/// its owner, mode and ACLs in one change, so no crash or sync leaves it
/// with others. Without `O_EXCL`, threads creating one name at once all
/// succeed with the same file. Stores the handle in `*out`. Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn pollfs_open(
    fs: *const PollfsFs,
    path: *const c_char,
    flags: c_int,
    mode: u32,
    out: *mut *mut PollfsFile,
) -> c_int {
    int("pollfs_open", || {
        // SAFETY: the caller's contract.
        let (fs, who) = unsafe { fs_creds(fs) }?;
        // SAFETY: the caller's contract.
        let path = unsafe { raw::str(path, "the path") }?;
        let file = open(&fs, &who, path, flags, mode)?;
        // SAFETY: the caller's contract: `out` is writable.
        unsafe { raw::put(out, Box::into_raw(Box::new(file))) }?;
        Ok(0)
    })
}

fn open(
    fs: &Fs<Dev>,
    who: &Creds,
    path: &str,
    flags: c_int,
    mode: u32,
) -> Result<PollfsFile, Fail> {
    let file = open_file(fs, who, path, flags, mode)?;
    let handle = PollfsFile::new(file, flags, who);
    if flags & libc::O_TRUNC != 0 && !handle.file.is_empty() {
        handle.before_write()?;
        handle.file.set_len(0)?;
    }
    Ok(handle)
}

/// Permission bits asked for: `mode & 07777`, its file-type bits ignored.
fn perm(mode: u32) -> u16 {
    u16::try_from(mode & 0o7777).unwrap_or(0)
}

/// What opening with `flags` asks of the file's permissions.
fn wanted(flags: c_int) -> Want {
    let rw = match flags & libc::O_ACCMODE {
        libc::O_WRONLY => Want::WRITE,
        libc::O_RDWR => Want::READ.and(Want::WRITE),
        _ => Want::READ,
    };
    if flags & libc::O_TRUNC != 0 {
        rw.and(Want::WRITE)
    } else {
        rw
    }
}

/// The open under `pollfs_open`, as `who`. A file it creates is made with
/// its owner, mode and ACLs in one engine change
/// ([`Fs::create_or_open_by`]), and without `O_EXCL` a file another
/// thread made an instant before is opened instead (and checked as any
/// existing file is).
fn open_file<D: BlockDevice>(
    fs: &Fs<D>,
    who: &Creds,
    path: &str,
    flags: c_int,
    mode: u32,
) -> Result<File<D>, Fail> {
    let at = |e: pollfs_core::Error| Fail::about(path, &e);
    let (dir, name) = fs.parent_by(path, who).map_err(at)?;
    let exclusive = flags & libc::O_EXCL != 0;
    let existing = match fs.lookup_in(dir, name) {
        Ok(ino) if flags & libc::O_CREAT == 0 || !exclusive => Some(ino),
        Ok(_) => return Err(at(pollfs_core::error::NamespaceError::Exists.into())),
        Err(e) if flags & libc::O_CREAT == 0 => return Err(at(e)),
        Err(_) => None,
    };
    if let Some(ino) = existing {
        fs.check_access(ino, who, wanted(flags)).map_err(at)?;
        return fs.open_ino(ino).map_err(at);
    }
    fs.check_access(dir, who, Want::WRITE_EXEC).map_err(at)?;
    let (file, made) = fs
        .create_or_open_by(dir, name, perm(mode), who, exclusive)
        .map_err(at)?;
    hook::point("pollfs_open: created");
    if made == Created::Found {
        fs.check_access(file.ino(), who, wanted(flags))
            .map_err(at)?;
    }
    Ok(file)
}

/// The mkdir under `pollfs_mkdir`, as `who`: the directory is made with
/// its owner, mode and ACLs in one engine change.
fn mkdir<D: BlockDevice>(
    fs: &Fs<D>,
    who: &Creds,
    path: &str,
    mode: u32,
) -> pollfs_core::Result<()> {
    let (dir, name) = fs.parent_by(path, who)?;
    fs.check_access(dir, who, Want::WRITE_EXEC)?;
    fs.mkdir_by(dir, name, perm(mode), who)?;
    hook::point("pollfs_mkdir: made");
    Ok(())
}

/// The directory of `path`'s last name and that name, if `who` may
/// search the way there and remove that entry (see
/// [`Fs::check_remove_by`]: the sticky bit's rule too).
pub(crate) fn removing<'p, D: BlockDevice>(
    fs: &Fs<D>,
    who: &Creds,
    path: &'p str,
) -> pollfs_core::Result<(InodeId, &'p str)> {
    let (dir, name) = fs.parent_by(path, who)?;
    fs.check_remove_by(dir, name, who)?;
    Ok((dir, name))
}

/// The directory of `path`'s last name and that name, if `who` may
/// search the way there and change entries in it.
pub(crate) fn changing<'p, D: BlockDevice>(
    fs: &Fs<D>,
    who: &Creds,
    path: &'p str,
) -> pollfs_core::Result<(InodeId, &'p str)> {
    let (dir, name) = fs.parent_by(path, who)?;
    fs.check_access(dir, who, Want::WRITE_EXEC)?;
    Ok((dir, name))
}

/// A path-taking namespace operation.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string.
pub(crate) unsafe fn at_path(
    name: &str,
    fs: *const PollfsFs,
    path: *const c_char,
    op: impl FnOnce(&Fs<Dev>, &Creds, &str) -> pollfs_core::Result<()>,
) -> c_int {
    int(name, || {
        // SAFETY: the caller's contract.
        let (fs, who) = unsafe { fs_creds(fs) }?;
        // SAFETY: the caller's contract.
        let path = unsafe { raw::str(path, "the path") }?;
        hook::point(name);
        op(&fs, &who, path).map_err(|e| Fail::about(path, &e))?;
        Ok(0)
    })
}

/// Removes the file (or symbolic link) at `path`; an open file keeps its
/// data until its last handle closes. Needs write and search permission
/// on its directory (`-EACCES`) and, in a sticky directory, to own the
/// file or the directory (`-EPERM`). Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pollfs_remove(fs: *const PollfsFs, path: *const c_char) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        at_path("pollfs_remove", fs, path, |fs, who, p| {
            let (dir, name) = removing(fs, who, p)?;
            fs.unlink_in(dir, name)
        })
    }
}

/// Makes the directory `path` with permission bits `mode & 01777`
/// (set-user-ID and set-group-ID ignored, as mkdir(2) on Linux), masked
/// by its directory's default ACL, which it inherits, or else by the
/// handle's umask; in a set-group-ID directory it takes the directory's
/// group and the bit. The directory is made with its owner, mode and
/// ACLs in one change. An existing `path` is `-EEXIST`; `-EACCES` without
/// search and write permission on its directory. Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pollfs_mkdir(
    fs: *const PollfsFs,
    path: *const c_char,
    mode: u32,
) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        at_path("pollfs_mkdir", fs, path, |fs, who, p| {
            mkdir(fs, who, p, mode)
        })
    }
}

/// Removes the empty directory `path` (permissions as `pollfs_remove`).
/// Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pollfs_rmdir(fs: *const PollfsFs, path: *const c_char) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        at_path("pollfs_rmdir", fs, path, |fs, who, p| {
            let (dir, name) = removing(fs, who, p)?;
            fs.rmdir_in(dir, name)
        })
    }
}

/// Renames `from` to `to`, replacing a file at `to` atomically, as
/// rename(2). Permissions: as `pollfs_remove` for `from` and for a `to`
/// that exists, write and search on `to`'s directory. Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `from` and `to` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn pollfs_rename(
    fs: *const PollfsFs,
    from: *const c_char,
    to: *const c_char,
) -> c_int {
    int("pollfs_rename", || {
        // SAFETY: the caller's contract.
        let (fs, who) = unsafe { fs_creds(fs) }?;
        // SAFETY: the caller's contract.
        let from = unsafe { raw::str(from, "the source path") }?;
        // SAFETY: the caller's contract.
        let to = unsafe { raw::str(to, "the target path") }?;
        let about = |e: pollfs_core::Error| Fail::about(&format!("{from} -> {to}"), &e);
        let (fd, fname) = removing(&fs, &who, from).map_err(about)?;
        let (td, tname) = changing(&fs, &who, to).map_err(about)?;
        // A target that is there is removed by the rename: the sticky
        // bit's rule holds for it too.
        if fs.lookup_in(td, tname).is_ok() {
            fs.check_remove_by(td, tname, &who).map_err(about)?;
        }
        fs.rename_in(fd, fname, td, tname, pollfs_core::RenameFlags::default())
            .map_err(about)?;
        Ok(0)
    })
}

/// Fills `*out` with the attributes of what `path` names. Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn pollfs_stat(
    fs: *const PollfsFs,
    path: *const c_char,
    out: *mut PollfsStat,
) -> c_int {
    int("pollfs_stat", || {
        // SAFETY: the caller's contract.
        let (fs, who) = unsafe { fs_creds(fs) }?;
        // SAFETY: the caller's contract.
        let path = unsafe { raw::str(path, "the path") }?;
        let meta = fs
            .lookup_by(path, &who)
            .and_then(|ino| fs.attr(ino))
            .map_err(|e| Fail::about(path, &e))?;
        // SAFETY: the caller's contract: `out` is writable.
        unsafe { raw::put(out, PollfsStat::from(meta)) }?;
        Ok(0)
    })
}

/// Reads the entry of directory `path` that follows `*cookie` (0 for the
/// first) into `*out` and advances `*cookie`. Returns 1 with an entry, 0
/// at the end, or a negative errno. `.` and `..` are not listed; entries
/// come in the order of a hash of their names (a cookie stays valid while
/// entries come and go). Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string, `cookie` and
/// `out` writable.
#[no_mangle]
pub unsafe extern "C" fn pollfs_readdir(
    fs: *const PollfsFs,
    path: *const c_char,
    cookie: *mut u64,
    out: *mut PollfsDirent,
) -> c_int {
    int("pollfs_readdir", || {
        // SAFETY: the caller's contract.
        let (fs, who) = unsafe { fs_creds(fs) }?;
        // SAFETY: the caller's contract.
        let path = unsafe { raw::str(path, "the path") }?;
        // SAFETY: the caller's contract: `cookie` is writable.
        let cookie = unsafe { raw::obj_mut(cookie, "the cookie") }?;
        let dir = fs.lookup_by(path, &who)?;
        fs.check_access(dir, &who, Want::READ)?;
        let Some(entry) = fs.read_dir(dir, *cookie, 1)?.into_iter().next() else {
            return Ok(0);
        };
        let mut name = [0 as c_char; POLLFS_NAME_BUF];
        for (slot, b) in name
            .iter_mut()
            .zip(entry.name.bytes().take(POLLFS_NAME_MAX))
        {
            *slot = b as c_char;
        }
        let dirent = PollfsDirent {
            ino: entry.ino.get(),
            type_: type_bits(entry.kind),
            name,
        };
        // SAFETY: the caller's contract: `out` is writable.
        unsafe { raw::put(out, dirent) }?;
        *cookie = entry.cookie;
        Ok(1)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::{Arc, Barrier};

    use pollfs_core::dev::ram::RamDevice;
    use pollfs_core::error::{Error, NamespaceError};

    use super::*;

    const FRAMES: u32 = 256;

    fn config() -> pollfs_core::Config {
        pollfs_core::Config {
            cache_pages: FRAMES / 2,
            ..pollfs_core::hosted::config()
        }
    }

    /// A new filesystem on a RAM device, and the device (to mount again
    /// after dropping the filesystem without unmounting: a crash).
    fn ram_fs() -> (Fs<RamDevice>, RamDevice) {
        let ram = RamDevice::new(16 << 20, 4096, FRAMES).unwrap();
        (Fs::format(ram.clone(), config(), 7).unwrap(), ram)
    }

    /// Runs `open_file` on `path` from `threads` threads released at once.
    fn race(
        fs: &Fs<RamDevice>,
        path: &str,
        threads: usize,
        flags: c_int,
    ) -> Vec<Result<InodeId, i32>> {
        let go = Arc::new(Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (fs, go, path) = (fs.clone(), go.clone(), path.to_string());
                std::thread::spawn(move || {
                    go.wait();
                    open_file(&fs, &Creds::root(), &path, flags, 0o600)
                        .map(|f| f.ino())
                        .map_err(|e| e.errno())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn threads_creating_one_name_without_excl_all_open_the_same_file() {
        let (fs, _ram) = ram_fs();
        for round in 0..200 {
            let path = format!("/f{round}");
            let got = race(&fs, &path, 4, libc::O_CREAT | libc::O_RDWR);
            let ino = fs.lookup(&path).unwrap();
            assert!(
                got.iter().all(|r| *r == Ok(ino)),
                "round {round}: {got:?}, the file is {ino}"
            );
        }
    }

    #[test]
    fn with_o_excl_exactly_one_thread_creates_a_name() {
        let (fs, _ram) = ram_fs();
        for round in 0..200 {
            let path = format!("/f{round}");
            let got = race(&fs, &path, 4, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR);
            let made = got.iter().filter(|r| r.is_ok()).count();
            let exist = got.iter().filter(|r| **r == Err(libc::EEXIST)).count();
            assert_eq!((made, exist), (1, 3), "round {round}: {got:?}");
        }
    }

    /// The permission bits of `path` after a crash: `fs` dropped without
    /// unmounting, the device mounted again.
    fn perm_after_crash(fs: Fs<RamDevice>, ram: RamDevice, path: &str) -> u16 {
        drop(fs);
        let fs = Fs::mount(ram, config()).unwrap();
        let ino = fs.lookup(path).unwrap();
        fs.attr(ino).unwrap().perm
    }

    #[test]
    fn a_file_created_0600_is_0600_after_a_crash_after_its_create() {
        let (fs, ram) = ram_fs();
        let other = fs.create("/other").unwrap();
        // Another thread's sync, right after the create: it makes the new
        // file durable, and the crash follows before anything else is.
        hook::arm("pollfs_open: created", move || other.sync_all().unwrap());
        let f = open_file(
            &fs,
            &Creds::root(),
            "/secret",
            libc::O_CREAT | libc::O_RDWR,
            0o600,
        )
        .unwrap();
        assert_eq!(fs.attr(f.ino()).unwrap().perm, 0o600);
        drop(f);
        assert_eq!(perm_after_crash(fs, ram, "/secret"), 0o600);
    }

    #[test]
    fn a_directory_made_0700_is_0700_after_a_crash_after_its_mkdir() {
        let (fs, ram) = ram_fs();
        let other = fs.create("/other").unwrap();
        hook::arm("pollfs_mkdir: made", move || other.sync_all().unwrap());
        mkdir(&fs, &Creds::root(), "/private", 0o700).unwrap();
        assert_eq!(perm_after_crash(fs, ram, "/private"), 0o700);
    }

    /// A new filesystem handle on a RAM device, through the C ABI.
    fn formatted() -> *mut PollfsFs {
        let mut out = core::ptr::null_mut();
        // SAFETY: a C string, no options, `out` writable.
        let r = unsafe { pollfs_format(c"ram".as_ptr(), core::ptr::null(), &mut out) };
        assert_eq!(r, 0);
        out
    }

    fn opened(fs: *const PollfsFs, path: &core::ffi::CStr) -> *mut PollfsFile {
        let mut out = core::ptr::null_mut();
        // SAFETY: a live handle, a C string, `out` writable.
        let r = unsafe {
            pollfs_open(
                fs,
                path.as_ptr(),
                libc::O_CREAT | libc::O_RDWR,
                0o644,
                &mut out,
            )
        };
        assert_eq!(r, 0);
        out
    }

    #[test]
    fn a_panic_in_a_file_call_poisons_that_file_only() {
        let fs = formatted();
        let (a, b) = (opened(fs, c"/a"), opened(fs, c"/b"));
        hook::arm("pollfs_fsync", || panic!("planted"));
        let mut stat = PollfsStat::default();
        let mut buf = [0u8; 8];
        // SAFETY: live handles, buffers of their stated lengths.
        unsafe {
            assert_eq!(crate::pollfs_fsync(a), -libc::EIO);
            assert_eq!(crate::pollfs_fsync(a), -libc::ENOTRECOVERABLE);
            assert_eq!(
                crate::pollfs_pread(a, buf.as_mut_ptr().cast(), 8, 0),
                -(libc::ENOTRECOVERABLE as isize)
            );
            assert_eq!(crate::pollfs_fstat(a, &mut stat), -libc::ENOTRECOVERABLE);
            assert_eq!(crate::pollfs_fsync(b), 0);
            assert_eq!(pollfs_sync(fs), 0);
            assert_eq!(crate::pollfs_close(a), 0);
            assert_eq!(crate::pollfs_close(b), 0);
            assert_eq!(pollfs_unmount(fs), 0);
        }
    }

    #[test]
    fn a_panic_in_a_filesystem_call_poisons_the_filesystem() {
        let fs = formatted();
        let f = opened(fs, c"/f");
        hook::arm("pollfs_mkdir", || panic!("planted"));
        let mut out = core::ptr::null_mut();
        let mut stat = PollfsStat::default();
        // SAFETY: live handles, C strings, `out` and `stat` writable.
        unsafe {
            assert_eq!(pollfs_mkdir(fs, c"/d".as_ptr(), 0o755), -libc::EIO);
            assert_eq!(pollfs_sync(fs), -libc::ENOTRECOVERABLE);
            assert_eq!(
                pollfs_stat(fs, c"/f".as_ptr(), &mut stat),
                -libc::ENOTRECOVERABLE
            );
            let r = pollfs_open(fs, c"/g".as_ptr(), libc::O_CREAT, 0o644, &mut out);
            assert_eq!(r, -libc::ENOTRECOVERABLE);
            assert!(out.is_null());
            assert_eq!(crate::pollfs_fsync(f), 0, "a file the panic did not touch");
            assert_eq!(crate::pollfs_close(f), 0);
            assert_eq!(pollfs_unmount(fs), -libc::ENOTRECOVERABLE);
        }
    }

    #[test]
    fn mkdir_of_an_existing_name_is_eexist() {
        let (fs, _ram) = ram_fs();
        mkdir(&fs, &Creds::root(), "/d", 0o755).unwrap();
        let e = mkdir(&fs, &Creds::root(), "/d", 0o755).unwrap_err();
        assert!(matches!(e, Error::Namespace(NamespaceError::Exists)), "{e}");
    }
}
