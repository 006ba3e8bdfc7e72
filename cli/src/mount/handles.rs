//! Open files, by FUSE file handle, and the directories the kernel knows.
//!
//! A file handle keeps its [`File`] open until the kernel releases it, so a
//! file removed while open keeps its data until its last close, as on any
//! Linux filesystem. The table is split in shards so that threads serving
//! different files rarely touch the same lock; each lookup takes one
//! shard's read lock for a hash probe and an `Arc` clone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use pollfs_core::dev::BlockDevice;
use pollfs_core::{File, Fs, HeldDir, InodeId};

const SHARDS: usize = 16;

/// Open files by handle.
#[derive(Debug)]
pub struct Files<D: BlockDevice> {
    next: AtomicU64,
    shards: [RwLock<HashMap<u64, Arc<File<D>>>>; SHARDS],
}

impl<D: BlockDevice> Default for Files<D> {
    fn default() -> Self {
        Files {
            // 0 is left unused, so a handle FUSE filled in as 0 for a
            // request without one never matches.
            next: AtomicU64::new(1),
            shards: std::array::from_fn(|_| RwLock::new(HashMap::new())),
        }
    }
}

impl<D: BlockDevice> Files<D> {
    fn shard(&self, fh: u64) -> &RwLock<HashMap<u64, Arc<File<D>>>> {
        &self.shards[fh as usize % SHARDS]
    }

    /// Keeps `file` open under a new handle.
    pub fn insert(&self, file: File<D>) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.shard(fh)
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(fh, Arc::new(file));
        fh
    }

    /// The file open under `fh`.
    pub fn get(&self, fh: u64) -> Option<Arc<File<D>>> {
        self.shard(fh)
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&fh)
            .cloned()
    }

    /// Forgets `fh`; the file closes when no request still uses it.
    pub fn remove(&self, fh: u64) -> Option<Arc<File<D>>> {
        self.shard(fh)
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&fh)
    }

    /// Closes every file (the mount is going away).
    pub fn clear(&self) {
        for s in &self.shards {
            s.write().unwrap_or_else(PoisonError::into_inner).clear();
        }
    }
}

/// Directories the kernel knows: each one a `lookup`, `mkdir` or
/// `readdirplus` entry gave it and that it has not yet forgotten, held
/// ([`HeldDir`]) with the kernel's count of references. A directory
/// removed while the kernel still has it (an open descriptor, a working
/// directory) so stays an inode, with no link and an empty listing, until
/// the kernel's `forget`, as a removed file stays until its `release`.
/// Files need no such count: what reaches a removed file holds it open.
#[derive(Debug)]
pub struct KnownDirs<D: BlockDevice> {
    dirs: Mutex<HashMap<InodeId, (u64, HeldDir<D>)>>,
}

impl<D: BlockDevice> Default for KnownDirs<D> {
    fn default() -> Self {
        KnownDirs {
            dirs: Mutex::new(HashMap::new()),
        }
    }
}

impl<D: BlockDevice> KnownDirs<D> {
    /// Counts one more reference to directory `ino`, held by the engine
    /// from the first. A directory freed before it could be held is left
    /// out: the kernel learns it is gone at its next request.
    pub fn looked_up(&self, fs: &Fs<D>, ino: InodeId) {
        if ino == InodeId::ROOT {
            // The kernel's root is never forgotten, nor removed.
            return;
        }
        let mut dirs = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((n, _)) = dirs.get_mut(&ino) {
            *n += 1;
        } else if let Ok(held) = fs.hold_dir(ino) {
            dirs.insert(ino, (1, held));
        }
    }

    /// The kernel forgets `n` references to `ino`; with the last, the
    /// directory is let go (and freed if it was removed).
    pub fn forget(&self, ino: InodeId, n: u64) {
        let gone = {
            let mut dirs = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
            match dirs.get_mut(&ino) {
                Some((count, _)) if *count > n => {
                    *count -= n;
                    None
                }
                Some(_) => dirs.remove(&ino),
                None => None,
            }
        };
        // Freed outside the lock: it logs a record.
        drop(gone);
    }

    /// Lets every directory go (the mount is ending).
    pub fn clear(&self) {
        let all = std::mem::take(&mut *self.dirs.lock().unwrap_or_else(PoisonError::into_inner));
        drop(all);
    }
}
