//! Whole-file locks between the backends of one process.
//!
//! redb locks its file so that two `Database`s never write it at once.
//! On a kernel filesystem that is `flock`; a pollfs filesystem belongs to
//! one process, so a table in this process is enough. It offers what
//! redb's contract calls level 2: whole-file locks only (byte ranges are
//! `Unsupported`), which serves the default `ExclusiveWriter` mode: a
//! second `Database` on a file already open fails with
//! `DatabaseAlreadyOpen` instead of corrupting it.
//!
//! Two mounts of one device in one process are two filesystems that
//! know nothing of each other (the engine does not support that either):
//! their files are told apart here, so such a pair is not caught.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

use pollfs_core::dev::BlockDevice;
use pollfs_core::{File, InodeId};

/// A file of a live mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileKey {
    /// Where the mount keeps its device: the same for every handle on the
    /// mount and fixed while any of them lives, which a locking backend's
    /// own handle ensures.
    mount: usize,
    ino: InodeId,
}

impl FileKey {
    /// The key of `file`.
    pub fn of<D: BlockDevice>(file: &File<D>) -> FileKey {
        FileKey {
            mount: std::ptr::from_ref(file.fs().device()) as usize,
            ino: file.ino(),
        }
    }
}

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// With other shared holders (read-only databases).
    Shared,
    /// Alone (a writer).
    Exclusive,
}

/// Who holds one file's lock.
#[derive(Clone, Copy, Debug)]
enum Holders {
    Exclusive,
    Shared(u32),
}

/// Every file locked in this process. The mutex is a leaf: nothing else
/// is locked while it is held.
struct Table {
    held: Mutex<HashMap<FileKey, Holders>>,
    released: Condvar,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| Table {
        held: Mutex::new(HashMap::new()),
        released: Condvar::new(),
    })
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, HashMap<FileKey, Holders>> {
        // The map is consistent between statements: a panic elsewhere
        // cannot leave it half-changed.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Takes `mode` on `key` in `held` if nothing conflicts.
fn take(held: &mut HashMap<FileKey, Holders>, key: FileKey, mode: Mode) -> bool {
    match (held.get(&key).copied(), mode) {
        (None, Mode::Exclusive) => {
            held.insert(key, Holders::Exclusive);
            true
        }
        (None, Mode::Shared) => {
            held.insert(key, Holders::Shared(1));
            true
        }
        (Some(Holders::Shared(n)), Mode::Shared) => {
            held.insert(key, Holders::Shared(n + 1));
            true
        }
        _ => false,
    }
}

/// One backend's claim on its file's lock.
#[derive(Debug)]
pub struct FileLock {
    key: FileKey,
    /// What this backend holds. Taken before the table's mutex.
    mine: Mutex<Option<Mode>>,
}

impl FileLock {
    /// A claim on `key`, holding nothing yet.
    pub fn new(key: FileKey) -> FileLock {
        FileLock {
            key,
            mine: Mutex::new(None),
        }
    }

    fn mine(&self) -> MutexGuard<'_, Option<Mode>> {
        self.mine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the lock in `mode` unless another backend's lock conflicts.
    /// A backend holds one lock at a time (redb never asks for a second):
    /// asking again while holding one answers whether that one is `mode`.
    pub fn try_acquire(&self, mode: Mode) -> bool {
        let mut mine = self.mine();
        if let Some(held) = *mine {
            return held == mode;
        }
        let ok = take(&mut table().lock(), self.key, mode);
        if ok {
            *mine = Some(mode);
        }
        ok
    }

    /// Takes the lock in `mode`, waiting for conflicting holders to let
    /// go.
    pub fn acquire(&self, mode: Mode) {
        let mut mine = self.mine();
        if mine.is_some() {
            return;
        }
        let t = table();
        let mut held = t.lock();
        while !take(&mut held, self.key, mode) {
            held = t
                .released
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *mine = Some(mode);
    }

    /// Lets go of the lock, if held.
    pub fn release(&self) {
        let mut mine = self.mine();
        let Some(mode) = mine.take() else {
            return;
        };
        let t = table();
        let mut held = t.lock();
        match (held.get(&self.key).copied(), mode) {
            (Some(Holders::Shared(n)), Mode::Shared) if n > 1 => {
                held.insert(self.key, Holders::Shared(n - 1));
            }
            _ => {
                held.remove(&self.key);
            }
        }
        drop(held);
        t.released.notify_all();
    }

    /// True if a lock on the file is held by another backend.
    pub fn held_elsewhere(&self) -> bool {
        let mine = self.mine();
        let held = table().lock();
        match (held.get(&self.key), *mine) {
            (None, _) => false,
            (Some(Holders::Shared(n)), Some(Mode::Shared)) => *n > 1,
            (Some(_), Some(Mode::Exclusive)) => false,
            (Some(_), _) => true,
        }
    }
}

impl Drop for FileLock {
    /// A backend dropped without redb's `close` (one never given to redb,
    /// or a failed open) lets go too.
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ino: u64) -> FileKey {
        FileKey {
            mount: 1,
            ino: InodeId(ino),
        }
    }

    #[test]
    fn exclusive_excludes_everyone_until_released() {
        let (a, b) = (FileLock::new(key(10)), FileLock::new(key(10)));
        assert!(a.try_acquire(Mode::Exclusive));
        assert!(!b.try_acquire(Mode::Exclusive));
        assert!(!b.try_acquire(Mode::Shared));
        assert!(b.held_elsewhere());
        assert!(!a.held_elsewhere());
        a.release();
        assert!(b.try_acquire(Mode::Shared));
        assert!(!FileLock::new(key(11)).held_elsewhere());
    }

    #[test]
    fn shared_holders_count_and_dropping_releases() {
        let (a, b, c) = (
            FileLock::new(key(20)),
            FileLock::new(key(20)),
            FileLock::new(key(20)),
        );
        assert!(a.try_acquire(Mode::Shared));
        assert!(b.try_acquire(Mode::Shared));
        assert!(a.held_elsewhere());
        assert!(!c.try_acquire(Mode::Exclusive));
        drop(a);
        assert!(!c.try_acquire(Mode::Exclusive));
        b.release();
        assert!(c.try_acquire(Mode::Exclusive));
    }

    #[test]
    fn a_waiting_acquire_gets_the_lock_when_released() {
        let a = FileLock::new(key(30));
        a.acquire(Mode::Exclusive);
        let waiter = std::thread::spawn(|| {
            let b = FileLock::new(key(30));
            b.acquire(Mode::Exclusive);
            b.release();
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!waiter.is_finished());
        a.release();
        waiter.join().unwrap_or_else(|_| panic!("waiter panicked"));
    }
}
