//! One pollfs process per device file: a writer (a mount, mkfs, a repair,
//! a bench) holds an exclusive `flock` on a `file:` device for as long as
//! it has it open, a reader (fsck) a shared one, so none of them reads or
//! writes a filesystem that another process is changing. (A `vfio:`
//! device needs no lock: the kernel lets one process at a time open a
//! VFIO group, and refuses others with EBUSY.)

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// A held lock; released when dropped (or when the process ends, however
/// it ends).
#[derive(Debug)]
pub struct DeviceLock {
    _file: File,
}

/// Why a device file could not be locked.
#[derive(Debug)]
#[non_exhaustive]
pub enum LockError {
    /// Another process holds a lock that conflicts.
    InUse,
    /// The file could not be opened or locked.
    Io(io::Error),
}

/// Locks the device file at `path`: `exclusive` to change it, shared to
/// read it. Fails at once if another process holds a lock that conflicts.
pub fn lock(path: &Path, exclusive: bool) -> Result<DeviceLock, LockError> {
    let file = File::open(path).map_err(LockError::Io)?;
    match try_flock(&file, exclusive) {
        Ok(()) => Ok(DeviceLock { _file: file }),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(LockError::InUse),
        Err(e) => Err(LockError::Io(e)),
    }
}

/// `flock(2)` without waiting: takes a shared or exclusive lock, or fails
/// with `WouldBlock` if another open file description holds a conflicting
/// one. The lock lasts until `file` (every duplicate of its descriptor)
/// is closed.
#[allow(unsafe_code)]
fn try_flock(file: &File, exclusive: bool) -> io::Result<()> {
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    // SAFETY: flock takes a descriptor, which `file` keeps open for the
    // call, and an operation; it touches no memory of ours.
    let rc = unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exclusive_lock_shuts_out_every_other() {
        let p = std::env::temp_dir().join(format!("pollfs-devlock-{}", std::process::id()));
        std::fs::write(&p, b"").unwrap();
        let held = lock(&p, true).unwrap();
        assert!(matches!(lock(&p, true), Err(LockError::InUse)));
        assert!(matches!(lock(&p, false), Err(LockError::InUse)));
        drop(held);
        let a = lock(&p, false).unwrap();
        let b = lock(&p, false).unwrap();
        assert!(matches!(lock(&p, true), Err(LockError::InUse)));
        drop((a, b));
        std::fs::remove_file(&p).unwrap();
    }
}
