//! Open files: positional reads and writes (plain and vectored), syncs,
//! size changes. Every function here is thread-safe: threads may share a
//! `PollfsFile` and call these at once (each runs in the calling thread's
//! own engine session, made on its first use).

use core::ffi::{c_int, c_void};

use pollfs_core::fs::posix::{Creds, S_ISGID, S_ISUID};
use pollfs_core::File;

use crate::device::Dev;
use crate::error::{int, size, Fail};
use crate::fs::PollfsStat;
use crate::poison::{Held, Poison};
use crate::{hook, raw};

/// An open file. Thread-safe. A panic in a call on it poisons it as one
/// poisons a `PollfsFs`: later calls on it fail with `-ENOTRECOVERABLE`;
/// `pollfs_close` still frees it. A file a panic did not touch keeps
/// working even if its filesystem handle is poisoned.
#[derive(Debug)]
pub struct PollfsFile {
    pub(crate) file: File<Dev>,
    /// Opened with `O_DIRECT`: reads and writes bypass the cache.
    pub(crate) direct: bool,
    /// Opened for reading (`O_RDONLY` or `O_RDWR`).
    readable: bool,
    /// Opened for writing (`O_WRONLY` or `O_RDWR`).
    writable: bool,
    /// Who opened it, if not root: a write or truncate by them takes the
    /// file's set-id bits (as the kernel checks the writer's
    /// credentials; these are the opener's, as the file's `f_cred`).
    writer: Option<Creds>,
    /// Set by a panic in a call on this handle (`crate::poison`).
    poison: Poison,
}

/// One buffer of a vectored read or write; the same layout as `struct
/// iovec` of `<sys/uio.h>`, so an array of those may be passed cast.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PollfsIovec {
    /// Start of the buffer.
    pub iov_base: *mut c_void,
    /// Its length in bytes.
    pub iov_len: usize,
}

impl PollfsFile {
    /// `file` opened with `flags` (`O_ACCMODE`, `O_DIRECT`) by `creds`.
    pub(crate) fn new(file: File<Dev>, flags: c_int, creds: &Creds) -> PollfsFile {
        let mode = flags & libc::O_ACCMODE;
        PollfsFile {
            file,
            direct: flags & libc::O_DIRECT != 0,
            readable: mode == libc::O_RDONLY || mode == libc::O_RDWR,
            writable: mode == libc::O_WRONLY || mode == libc::O_RDWR,
            writer: (!creds.is_root()).then(|| creds.clone()),
            poison: Poison::default(),
        }
    }

    /// Refuses a read of a file not opened for reading (EBADF, as
    /// read(2)).
    pub(crate) fn check_read(&self) -> Result<(), Fail> {
        if self.readable {
            Ok(())
        } else {
            Err(Fail::badf("the file is not open for reading"))
        }
    }

    /// Before a write or truncate: refuses one of a file not opened for
    /// writing (EBADF), and takes away what a write takes
    /// (`file_remove_privs`): its capability attribute, whoever writes,
    /// and its set-id bits if the opener is not root.
    pub(crate) fn before_write(&self) -> Result<(), Fail> {
        if !self.writable {
            return Err(Fail::badf("the file is not open for writing"));
        }
        let fs = self.file.fs();
        fs.remove_caps(&self.file)?;
        if let Some(who) = &self.writer {
            if self.file.metadata().perm & SET_ID != 0 {
                fs.kill_setid(self.file.ino(), |gid| who.keeps_sgid(gid))?;
            }
        }
        Ok(())
    }

    pub(crate) fn read(&self, buf: &mut [u8], offset: u64) -> Result<usize, Fail> {
        self.check_read()?;
        Ok(self.read_unchecked(buf, offset)?)
    }

    fn read_unchecked(&self, buf: &mut [u8], offset: u64) -> pollfs_core::Result<usize> {
        if self.direct {
            self.file.read_direct(buf, offset)
        } else {
            self.file.read_at(buf, offset)
        }
    }

    pub(crate) fn write(&self, buf: &[u8], offset: u64) -> Result<usize, Fail> {
        self.before_write()?;
        Ok(self.write_unchecked(buf, offset)?)
    }

    fn write_unchecked(&self, buf: &[u8], offset: u64) -> pollfs_core::Result<usize> {
        if self.direct {
            self.file.write_direct(buf, offset)
        } else {
            self.file.write_all_at(buf, offset).map(|()| buf.len())
        }
    }
}

/// The file behind a handle, held for one call (a panic before it is
/// dropped poisons the handle); `-ENOTRECOVERABLE` if it is poisoned.
///
/// # Safety
/// `f` is NULL or a live handle from `pollfs_open`.
pub(crate) unsafe fn file_of<'a>(f: *const PollfsFile) -> Result<Held<'a, PollfsFile>, Fail> {
    // SAFETY: the caller's contract.
    let handle = unsafe { raw::obj(f, "the file") }?;
    handle.poison.enter(handle, "the file")
}

/// The set-id bits a write may take.
const SET_ID: u16 = S_ISUID | S_ISGID;

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Closes the file. Its data stays in the cache until synced or written
/// back; closing does not sync. Not thread-safe: no other thread may be
/// using `file`.
///
/// # Safety
/// `file` came from `pollfs_open` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn pollfs_close(file: *mut PollfsFile) -> c_int {
    int("pollfs_close", || {
        // SAFETY: the caller's contract: a live handle, given up.
        drop(unsafe { raw::take(file, "the file") }?);
        Ok(0)
    })
}

/// Reads up to `len` bytes at `offset` into `buf`; returns how many (fewer
/// at the end of the file, 0 at or past it) or a negative errno. Holes
/// read as zeros. Thread-safe.
///
/// # Safety
/// `file` is a live handle; `buf` has `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn pollfs_pread(
    file: *const PollfsFile,
    buf: *mut c_void,
    len: usize,
    offset: u64,
) -> isize {
    size("pollfs_pread", || {
        // SAFETY: the caller's contract.
        let f = unsafe { file_of(file) }?;
        // SAFETY: the caller's contract.
        let buf = unsafe { raw::bytes_mut(buf, len) }?;
        Ok(count(f.read(buf, offset)?))
    })
}

/// Writes `len` bytes of `buf` at `offset`, extending the file if needed;
/// returns `len` or a negative errno. Durable after the next sync.
/// Thread-safe.
///
/// # Safety
/// `file` is a live handle; `buf` has `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn pollfs_pwrite(
    file: *const PollfsFile,
    buf: *const c_void,
    len: usize,
    offset: u64,
) -> isize {
    size("pollfs_pwrite", || {
        // SAFETY: the caller's contract.
        let f = unsafe { file_of(file) }?;
        // SAFETY: the caller's contract.
        let buf = unsafe { raw::bytes(buf, len) }?;
        Ok(count(f.write(buf, offset)?))
    })
}

/// Reads into `iovcnt` buffers in turn from `offset`, as preadv(2);
/// returns the bytes read or a negative errno. Thread-safe.
///
/// # Safety
/// `file` is a live handle; `iov` has `iovcnt` entries, each naming
/// writable memory.
#[no_mangle]
pub unsafe extern "C" fn pollfs_preadv(
    file: *const PollfsFile,
    iov: *const PollfsIovec,
    iovcnt: c_int,
    offset: u64,
) -> isize {
    size("pollfs_preadv", || {
        // SAFETY: the caller's contract.
        let f = unsafe { file_of(file) }?;
        let n = usize::try_from(iovcnt).map_err(|_| Fail::inval("iovcnt is negative"))?;
        // SAFETY: the caller's contract.
        let iov = unsafe { raw::slice(iov, n) }?;
        let mut done = 0usize;
        for v in iov {
            // SAFETY: the caller's contract: each entry names writable memory.
            let buf = unsafe { raw::bytes_mut(v.iov_base, v.iov_len) }?;
            let got = f.read(buf, offset + done as u64)?;
            done += got;
            if got < v.iov_len {
                break;
            }
        }
        Ok(count(done))
    })
}

/// Writes `iovcnt` buffers in turn from `offset`, as pwritev(2); returns
/// the bytes written or a negative errno. Thread-safe.
///
/// # Safety
/// `file` is a live handle; `iov` has `iovcnt` entries, each naming
/// readable memory.
#[no_mangle]
pub unsafe extern "C" fn pollfs_pwritev(
    file: *const PollfsFile,
    iov: *const PollfsIovec,
    iovcnt: c_int,
    offset: u64,
) -> isize {
    size("pollfs_pwritev", || {
        // SAFETY: the caller's contract.
        let f = unsafe { file_of(file) }?;
        let n = usize::try_from(iovcnt).map_err(|_| Fail::inval("iovcnt is negative"))?;
        // SAFETY: the caller's contract.
        let iov = unsafe { raw::slice(iov, n) }?;
        let mut done = 0usize;
        for v in iov {
            // SAFETY: the caller's contract: each entry names readable memory.
            let buf = unsafe { raw::bytes(v.iov_base, v.iov_len) }?;
            done += f.write(buf, offset + done as u64)?;
        }
        Ok(count(done))
    })
}

/// Makes the file's data, size and extents durable (one device command
/// for a small change). Thread-safe.
///
/// # Safety
/// `file` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn pollfs_fsync(file: *const PollfsFile) -> c_int {
    int("pollfs_fsync", || {
        // SAFETY: the caller's contract.
        let f = unsafe { file_of(file) }?;
        hook::point("pollfs_fsync");
        f.file.sync_all()?;
        Ok(0)
    })
}

/// Makes the file's data and what is needed to read it (size, extents)
/// durable. Thread-safe.
///
/// # Safety
/// `file` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn pollfs_fdatasync(file: *const PollfsFile) -> c_int {
    int("pollfs_fdatasync", || {
        // SAFETY: the caller's contract.
        unsafe { file_of(file) }?.file.sync_data()?;
        Ok(0)
    })
}

/// Truncates or extends the file to `len` bytes (growth reads as zeros).
/// Thread-safe.
///
/// # Safety
/// `file` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn pollfs_ftruncate(file: *const PollfsFile, len: u64) -> c_int {
    int("pollfs_ftruncate", || {
        // SAFETY: the caller's contract.
        let f = unsafe { file_of(file) }?;
        f.before_write()?;
        f.file.set_len(len)?;
        Ok(0)
    })
}

/// fallocate(2)'s modes that pollfs can honour: 0 extends the size to
/// `offset + len` if it is smaller (no blocks are reserved: pollfs maps
/// blocks when data is written, so a later write can still fail with
/// `-ENOSPC`); `FALLOC_FL_KEEP_SIZE` alone does nothing, for the same
/// reason; `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE` deallocates the
/// range (it reads as zeros). Other modes: `-EOPNOTSUPP`. Thread-safe.
///
/// # Safety
/// `file` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn pollfs_fallocate(
    file: *const PollfsFile,
    mode: c_int,
    offset: u64,
    len: u64,
) -> c_int {
    int("pollfs_fallocate", || {
        // SAFETY: the caller's contract.
        let held = unsafe { file_of(file) }?;
        held.before_write()?;
        let f = &held.file;
        let end = offset
            .checked_add(len)
            .ok_or_else(|| Fail::inval("offset + len overflows"))?;
        const KEEP: c_int = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH: c_int = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        match mode {
            0 => {
                if f.len() < end {
                    f.set_len(end)?;
                }
            }
            KEEP => {}
            PUNCH => f.punch_hole(offset, len)?,
            other => {
                return Err(Fail::new(
                    libc::EOPNOTSUPP,
                    format!("mode {other:#x}: only 0, KEEP_SIZE and PUNCH_HOLE|KEEP_SIZE"),
                ))
            }
        }
        Ok(0)
    })
}

/// Fills `*out` with the file's attributes. Thread-safe.
///
/// # Safety
/// `file` is a live handle, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn pollfs_fstat(file: *const PollfsFile, out: *mut PollfsStat) -> c_int {
    int("pollfs_fstat", || {
        // SAFETY: the caller's contract.
        let meta = unsafe { file_of(file) }?.file.metadata();
        // SAFETY: the caller's contract: `out` is writable.
        unsafe { raw::put(out, PollfsStat::from(meta)) }?;
        Ok(0)
    })
}
