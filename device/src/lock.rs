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
use std::time::{Duration, Instant};

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

/// [`lock`], waiting up to `patience` for a process that holds a
/// conflicting lock to let go (a mount that was just unmounted holds it
/// until it has written its checkpoint); `on_wait` is called once, when
/// the first try finds the device in use.
pub fn lock_waiting(
    path: &Path,
    exclusive: bool,
    patience: Duration,
    on_wait: impl FnOnce(),
) -> Result<DeviceLock, LockError> {
    let file = File::open(path).map_err(LockError::Io)?;
    let deadline = Instant::now() + patience;
    let mut on_wait = Some(on_wait);
    loop {
        match try_flock(&file, exclusive) {
            Ok(()) => return Ok(DeviceLock { _file: file }),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(LockError::InUse);
                }
                if let Some(said) = on_wait.take() {
                    said();
                }
                // flock(2) has no timeout: a blocking flock could not be
                // bounded, so the wait tries again at this interval.
                std::thread::sleep(LOCK_POLL);
            }
            Err(e) => return Err(LockError::Io(e)),
        }
    }
}

/// How often [`lock_waiting`] tries again.
const LOCK_POLL: Duration = Duration::from_millis(50);

/// `flock(2)` without waiting: takes a shared or exclusive lock, or fails
/// with `WouldBlock` if another open file description holds a conflicting
/// one. The lock lasts until `file` (every duplicate of its descriptor)
/// is closed.
pub fn try_flock(file: &File, exclusive: bool) -> io::Result<()> {
    flock(file, exclusive, false)
}

/// `flock(2)`, waiting for as long as another open file description holds
/// a conflicting lock (see [`try_flock`]).
pub fn flock_wait(file: &File, exclusive: bool) -> io::Result<()> {
    flock(file, exclusive, true)
}

#[allow(unsafe_code)]
fn flock(file: &File, exclusive: bool, wait: bool) -> io::Result<()> {
    let mut op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    if !wait {
        op |= libc::LOCK_NB;
    }
    loop {
        // SAFETY: flock takes a descriptor, which `file` keeps open for
        // the call, and an operation; it touches no memory of ours.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
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
        let held = lock(&p, true).unwrap();
        let mut told = 0;
        let refused = lock_waiting(&p, true, Duration::from_millis(200), || told += 1);
        assert!(matches!(refused, Err(LockError::InUse)));
        assert_eq!(told, 1, "the wait is announced once");
        let (granted, waiting) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn({
            let p = p.clone();
            move || {
                lock_waiting(&p, true, Duration::from_secs(30), || {
                    let _ = granted.send(());
                })
                .map(drop)
            }
        });
        // Released only once the waiter has found the device in use.
        waiting.recv().unwrap();
        drop(held);
        assert!(waiter.join().unwrap().is_ok());
        std::fs::remove_file(&p).unwrap();
    }
}
