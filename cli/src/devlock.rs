//! One pollfs process per device file: `mount` holds an exclusive `flock`
//! on a `file:` device for as long as it runs, `mkfs` for its run, and
//! `fsck` a shared one, so none of them reads or writes a filesystem that
//! a mount is changing. (A `vfio:` device needs no lock: the kernel lets
//! one process at a time open a VFIO group, and refuses others with
//! EBUSY.)

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

/// A held lock; released when dropped (or when the process ends, however
/// it ends).
#[derive(Debug)]
pub struct DeviceLock {
    _file: File,
}

/// Locks the device file at `path`: `exclusive` to change it, shared to
/// read it. Fails at once if another process holds a lock that conflicts.
pub fn lock(path: &Path, exclusive: bool) -> Result<DeviceLock, String> {
    let shown = path.display();
    let file = File::open(path).map_err(|e| format!("file:{shown}: {e}"))?;
    match crate::sys::try_flock(&file, exclusive) {
        Ok(()) => Ok(DeviceLock { _file: file }),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(format!(
            "file:{shown}: in use by another pollfs process (a mount, mkfs or fsck; \
             a mount that was just unmounted holds it until it has written its checkpoint)"
        )),
        Err(e) => Err(format!("file:{shown}: cannot lock: {e}")),
    }
}

/// [`lock`], waiting up to `patience` for a process that holds a
/// conflicting lock to let go (a mount that was just unmounted holds it
/// until it has written its checkpoint), and saying so once.
pub fn lock_waiting(
    path: &Path,
    exclusive: bool,
    patience: Duration,
) -> Result<DeviceLock, String> {
    let shown = path.display();
    let file = File::open(path).map_err(|e| format!("file:{shown}: {e}"))?;
    let deadline = Instant::now() + patience;
    let mut said = false;
    loop {
        match crate::sys::try_flock(&file, exclusive) {
            Ok(()) => return Ok(DeviceLock { _file: file }),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return lock(path, exclusive);
                }
                if !said {
                    eprintln!(
                        "pollfs: file:{shown} is in use by another pollfs process; waiting up \
                         to {} s for it to let go (a mount that was just unmounted holds it \
                         until it has written its checkpoint)",
                        patience.as_secs()
                    );
                    said = true;
                }
                std::thread::sleep(LOCK_POLL);
            }
            Err(e) => return Err(format!("file:{shown}: cannot lock: {e}")),
        }
    }
}

/// How often [`lock_waiting`] tries again.
const LOCK_POLL: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exclusive_lock_shuts_out_every_other() {
        let p = std::env::temp_dir().join(format!("pollfs-devlock-{}", std::process::id()));
        std::fs::write(&p, b"").unwrap();
        let held = lock(&p, true).unwrap();
        assert!(lock(&p, true).unwrap_err().contains("in use"));
        assert!(lock(&p, false).unwrap_err().contains("in use"));
        drop(held);
        let a = lock(&p, false).unwrap();
        let b = lock(&p, false).unwrap();
        assert!(lock(&p, true).is_err());
        drop((a, b));
        let held = lock(&p, true).unwrap();
        let err = lock_waiting(&p, true, Duration::from_millis(200)).unwrap_err();
        assert!(err.contains("in use"), "{err}");
        let waiter = std::thread::spawn({
            let p = p.clone();
            move || lock_waiting(&p, true, Duration::from_secs(30)).map(drop)
        });
        std::thread::sleep(Duration::from_millis(100));
        drop(held);
        waiter.join().unwrap().unwrap();
        std::fs::remove_file(&p).unwrap();
    }
}
