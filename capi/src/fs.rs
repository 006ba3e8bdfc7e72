//! Mounting and formatting, and the namespace: open, create, remove,
//! rename, directories, attributes. Every function here is thread-safe:
//! one `PollfsFs` may be used from any number of threads at once.

use core::ffi::{c_char, c_int};

use pollfs_core::fs::{Kind, Metadata, SetAttr};
use pollfs_core::Fs;

use crate::device::{self, Dev, Opening};
use crate::error::{int, Fail};
use crate::file::PollfsFile;
use crate::raw;

/// A mounted filesystem. Thread-safe.
#[derive(Debug)]
pub struct PollfsFs {
    pub(crate) fs: Fs<Dev>,
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
            ino: m.ino,
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
    Ok(Box::new(PollfsFs { fs }))
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
/// freed even if the sync fails). Files still open keep working. Not
/// thread-safe: no other thread may be using `fs`.
///
/// # Safety
/// `fs` came from `pollfs_mount` or `pollfs_format` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn pollfs_unmount(fs: *mut PollfsFs) -> c_int {
    int("pollfs_unmount", || {
        // SAFETY: the caller's contract: a live handle of ours, given up.
        let fs = unsafe { raw::take(fs, "the filesystem") }?;
        fs.fs.unmount()?;
        Ok(0)
    })
}

/// The filesystem behind a handle.
///
/// # Safety
/// `fs` is NULL or a live handle from `pollfs_mount`/`pollfs_format`.
pub(crate) unsafe fn fs_of<'a>(fs: *const PollfsFs) -> Result<&'a Fs<Dev>, Fail> {
    // SAFETY: the caller's contract.
    Ok(&unsafe { raw::obj(fs, "the filesystem") }?.fs)
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
        at_path("pollfs_sync_dir", fs, path, |fs, p| {
            fs.sync_dir(fs.lookup(p)?)
        })
    }
}

/// Opens the file at `path` (absolute or relative to the root; `/`
/// separated). `flags`: `O_CREAT` creates it if missing, with `O_EXCL`
/// fails with `-EEXIST` if it exists, `O_TRUNC` empties it, `O_DIRECT`
/// makes reads and writes bypass the cache (offsets and lengths multiples
/// of 4096, else `-EINVAL`); access modes are not checked. `mode`: the
/// permission bits of a file it creates. Stores the handle in `*out`.
/// Thread-safe.
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
        let fs = unsafe { fs_of(fs) }?;
        // SAFETY: the caller's contract.
        let path = unsafe { raw::str(path, "the path") }?;
        let file = open(fs, path, flags, mode)?;
        // SAFETY: the caller's contract: `out` is writable.
        unsafe { raw::put(out, Box::into_raw(Box::new(file))) }?;
        Ok(0)
    })
}

fn open(fs: &Fs<Dev>, path: &str, flags: c_int, mode: u32) -> Result<PollfsFile, Fail> {
    use pollfs_core::error::{Error, NamespaceError};
    let create = flags & libc::O_CREAT != 0;
    let exclusive = create && flags & libc::O_EXCL != 0;
    let file = match fs.open(path) {
        Ok(_) if exclusive => {
            return Err(Fail::new(libc::EEXIST, format!("{path}: exists (O_EXCL)")))
        }
        Ok(f) => f,
        Err(Error::Namespace(NamespaceError::NotFound)) if create => {
            let f = fs.create(path)?;
            let perm = u16::try_from(mode & 0o7777).unwrap_or(0o644);
            if perm != 0o644 {
                let change = SetAttr {
                    perm: Some(perm),
                    ..SetAttr::default()
                };
                fs.set_attr(f.ino(), change)?;
            }
            f
        }
        Err(e) => {
            return Err(Fail::new(
                e.errno().unwrap_or(libc::EIO),
                format!("{path}: {e}"),
            ))
        }
    };
    if flags & libc::O_TRUNC != 0 {
        file.set_len(0)?;
    }
    Ok(PollfsFile {
        file,
        direct: flags & libc::O_DIRECT != 0,
    })
}

/// A path-taking namespace operation.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string.
unsafe fn at_path(
    name: &str,
    fs: *const PollfsFs,
    path: *const c_char,
    op: impl FnOnce(&Fs<Dev>, &str) -> pollfs_core::Result<()>,
) -> c_int {
    int(name, || {
        // SAFETY: the caller's contract.
        let fs = unsafe { fs_of(fs) }?;
        // SAFETY: the caller's contract.
        let path = unsafe { raw::str(path, "the path") }?;
        op(fs, path)
            .map_err(|e| Fail::new(e.errno().unwrap_or(libc::EIO), format!("{path}: {e}")))?;
        Ok(0)
    })
}

/// Removes the file (or symbolic link) at `path`; an open file keeps its
/// data until its last handle closes. Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pollfs_remove(fs: *const PollfsFs, path: *const c_char) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { at_path("pollfs_remove", fs, path, |fs, p| fs.remove(p)) }
}

/// Makes the directory `path` with permission bits `mode`. Thread-safe.
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
        at_path("pollfs_mkdir", fs, path, |fs, p| {
            let ino = fs.mkdir(p)?;
            let perm = u16::try_from(mode & 0o7777).unwrap_or(0o755);
            if perm != 0o755 {
                let change = SetAttr {
                    perm: Some(perm),
                    ..SetAttr::default()
                };
                fs.set_attr(ino, change)?;
            }
            Ok(())
        })
    }
}

/// Removes the empty directory `path`. Thread-safe.
///
/// # Safety
/// `fs` is a live handle, `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pollfs_rmdir(fs: *const PollfsFs, path: *const c_char) -> c_int {
    // SAFETY: the caller's contract, passed on.
    unsafe { at_path("pollfs_rmdir", fs, path, |fs, p| fs.rmdir(p)) }
}

/// Renames `from` to `to`, replacing a file at `to` atomically, as
/// rename(2). Thread-safe.
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
        let fs = unsafe { fs_of(fs) }?;
        // SAFETY: the caller's contract.
        let from = unsafe { raw::str(from, "the source path") }?;
        // SAFETY: the caller's contract.
        let to = unsafe { raw::str(to, "the target path") }?;
        fs.rename(from, to).map_err(|e| {
            Fail::new(
                e.errno().unwrap_or(libc::EIO),
                format!("{from} -> {to}: {e}"),
            )
        })?;
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
        let fs = unsafe { fs_of(fs) }?;
        // SAFETY: the caller's contract.
        let path = unsafe { raw::str(path, "the path") }?;
        let meta = fs
            .lookup(path)
            .and_then(|ino| fs.attr(ino))
            .map_err(|e| Fail::new(e.errno().unwrap_or(libc::EIO), format!("{path}: {e}")))?;
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
        let fs = unsafe { fs_of(fs) }?;
        // SAFETY: the caller's contract.
        let path = unsafe { raw::str(path, "the path") }?;
        // SAFETY: the caller's contract: `cookie` is writable.
        let cookie = unsafe { raw::obj_mut(cookie, "the cookie") }?;
        let dir = fs.lookup(path)?;
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
            ino: entry.ino,
            type_: type_bits(entry.kind),
            name,
        };
        // SAFETY: the caller's contract: `out` is writable.
        unsafe { raw::put(out, dirent) }?;
        *cookie = entry.cookie;
        Ok(1)
    })
}
