//! redb on pollfs: [`PollfsBackend`] is a [`redb::StorageBackend`] over a
//! pollfs [`File`], so a redb database lives in a file of a pollfs
//! filesystem and its reads, writes and syncs go to the NVMe device
//! through the engine, with no kernel on the way.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pollfs_core::{hosted, Fs};
//! use pollfs_redb::PollfsBackend;
//! # let dev = pollfs_core::dev::ram::RamDevice::new(64 << 20, 4096, 1024)?;
//! let fs = Fs::format(dev, hosted::config(), 0x1234)?;
//! let db = redb::Database::builder()
//!     .create_with_backend(PollfsBackend::new(fs.open_or_create("db")?))?;
//! # Ok(()) }
//! ```
//!
//! - I/O: each method is one engine call on the handle (`read_exact_at`,
//!   `write_all_at`, `set_len`, `sync_data`), run in the calling thread's
//!   session, so redb's threads share the backend without a lock of ours.
//!   Errors become `io::Error` through the engine's own conversion (Linux
//!   errno; a read past the end is `UnexpectedEof`).
//! - Locks ([`lock`]): whole-file locks within this process, which is
//!   what redb's default `ExclusiveWriter` mode needs to refuse a second
//!   `Database` on the same file.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod lock;

/// The README's Rust examples (the engine's and this crate's), compiled and
/// run as doctests so they stay true as written.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExamples;

use std::io;
use std::ops::Bound;

use pollfs_core::dev::BlockDevice;
use pollfs_core::File;
use redb::{BackendError, StorageBackend};

pub use redb;

use lock::{FileLock, Mode};

/// A redb storage backend on a pollfs file. The file is the database:
/// redb's length is the file's length.
pub struct PollfsBackend<D: BlockDevice> {
    file: File<D>,
    lock: FileLock,
}

impl<D: BlockDevice> core::fmt::Debug for PollfsBackend<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PollfsBackend")
            .field("file", &self.file)
            .field("lock", &self.lock)
            .finish()
    }
}

impl<D: BlockDevice> PollfsBackend<D> {
    /// A backend on `file` (empty, or holding a redb database).
    pub fn new(file: File<D>) -> PollfsBackend<D> {
        let lock = FileLock::new(lock::FileKey::of(&file));
        PollfsBackend { file, lock }
    }

    /// The file under the database.
    pub fn file(&self) -> &File<D> {
        &self.file
    }
}

/// The whole file, in the two spellings redb uses for it; anything else
/// is a byte-range lock, which this backend does not offer.
fn whole_file(start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
    match (start, end) {
        (Bound::Unbounded | Bound::Included(0), Bound::Unbounded) => Ok(()),
        _ => Err(BackendError::Unsupported),
    }
}

impl<D: BlockDevice> StorageBackend for PollfsBackend<D> {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.file.len())
    }

    /// redb asks for exact reads: a range past the end of the file is an
    /// error (`UnexpectedEof`), never zeros or a short buffer.
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        Ok(self.file.read_exact_at(out, offset)?)
    }

    /// Growth reads as zeros (the engine maps no blocks for it).
    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        Ok(self.file.set_len(len)?)
    }

    /// The engine's fsync: the data written so far and the size and
    /// extents needed to read it are durable when this returns.
    fn sync_data(&self) -> Result<(), io::Error> {
        Ok(self.file.sync_data()?)
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        Ok(self.file.write_all_at(data, offset)?)
    }

    fn close(&self) -> Result<(), io::Error> {
        self.lock.release();
        Ok(())
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        whole_file(start, end)?;
        Ok(self.lock.try_acquire(Mode::Exclusive))
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        whole_file(start, end)?;
        Ok(self.lock.try_acquire(Mode::Shared))
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        whole_file(start, end)?;
        self.lock.acquire(Mode::Exclusive);
        Ok(())
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        whole_file(start, end)?;
        self.lock.acquire(Mode::Shared);
        Ok(())
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        whole_file(start, end)?;
        self.lock.release();
        Ok(())
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        whole_file(start, end)?;
        Ok(self.lock.held_elsewhere())
    }
}
