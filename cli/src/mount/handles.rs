//! Open files and open directories, by FUSE file handle.
//!
//! A file handle keeps its [`File`] open until the kernel releases it, so a
//! file removed while open keeps its data until its last close, as on any
//! Linux filesystem. The table is split in shards so that threads serving
//! different files rarely touch the same lock; each lookup takes one
//! shard's read lock for a hash probe and an `Arc` clone.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

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

/// Where `readdir` resumes: the offsets FUSE hands back are cookies that
/// name the last entry returned, so a listing resumes after that name
/// whatever was created or removed meanwhile. Entries come sorted by name:
/// every name present for the whole listing is returned exactly once; one
/// created or removed during it may or may not be (as POSIX allows).
///
/// Offsets 1 and 2 follow "." and ".."; offset `3 + c` follows the name
/// with cookie `c`. A name keeps its cookie for the life of the handle, so
/// reading a directory again (rewinddir) does not grow the table.
#[derive(Debug, Default)]
pub struct DirCursor {
    names: Vec<String>,
    cookies: BTreeMap<String, u64>,
}

/// Where a `readdir` call starts.
#[derive(Debug, PartialEq, Eq)]
pub enum Resume<'a> {
    /// At ".", "..", or the first name (0, 1 or 2 entries in).
    Start(u64),
    /// After this name.
    After(&'a str),
    /// An offset this handle never gave out.
    Invalid,
}

/// The offset after ".", after "..".
pub const DOT_OFFSETS: [u64; 2] = [1, 2];

impl DirCursor {
    /// Where the listing resumes for offset `off`.
    pub fn resume(&self, off: u64) -> Resume<'_> {
        match off {
            0..=2 => Resume::Start(off),
            _ => match self.names.get((off - 3) as usize) {
                Some(name) => Resume::After(name),
                None => Resume::Invalid,
            },
        }
    }

    /// The offset that follows `name`.
    pub fn offset_after(&mut self, name: &str) -> u64 {
        let c = match self.cookies.get(name) {
            Some(&c) => c,
            None => {
                let c = self.names.len() as u64;
                self.names.push(name.to_string());
                self.cookies.insert(name.to_string(), c);
                c
            }
        };
        c + 3
    }
}

/// Open directories by handle.
#[derive(Debug)]
pub struct Dirs {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Mutex<DirCursor>>>>,
}

impl Default for Dirs {
    fn default() -> Self {
        Dirs {
            next: AtomicU64::new(1),
            open: Mutex::new(HashMap::new()),
        }
    }
}

impl Dirs {
    /// A new directory handle.
    pub fn open(&self) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(fh, Arc::default());
        fh
    }

    /// The cursor of handle `fh`.
    pub fn get(&self, fh: u64) -> Option<Arc<Mutex<DirCursor>>> {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&fh)
            .cloned()
    }

    /// Forgets `fh`.
    pub fn close(&self, fh: u64) {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&fh);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_name_entries_and_stay_put() {
        let mut c = DirCursor::default();
        assert_eq!(c.resume(0), Resume::Start(0));
        assert_eq!(c.resume(2), Resume::Start(2));
        assert_eq!(c.resume(3), Resume::Invalid);
        let a = c.offset_after("a");
        let b = c.offset_after("b");
        assert_eq!((a, b), (3, 4));
        assert_eq!(c.offset_after("a"), 3, "a name keeps its cookie");
        assert_eq!(c.resume(4), Resume::After("b"));
        assert_eq!(c.resume(5), Resume::Invalid);
    }
}
