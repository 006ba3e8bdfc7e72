//! Open files, by FUSE file handle.
//!
//! A file handle keeps its [`File`] open until the kernel releases it, so a
//! file removed while open keeps its data until its last close, as on any
//! Linux filesystem. The table is split in shards so that threads serving
//! different files rarely touch the same lock; each lookup takes one
//! shard's read lock for a hash probe and an `Arc` clone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use pollfs_core::dev::BlockDevice;
use pollfs_core::File;

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
