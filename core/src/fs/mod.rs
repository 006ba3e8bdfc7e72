//! The file API: a mounted filesystem, its namespace, files, and the
//! sessions operations run in.
//!
//! ```text
//! Fs (shared, Send + Sync)
//!  ├─ namespace: directories keyed by (directory, name); create, mkdir,
//!  │  link, symlink, unlink, rmdir, rename, read_dir, attributes
//!  ├─ File (owned handles: read_at, write_at, set_len, punch_hole,
//!  │  allocate, sync)
//!  ├─ Session (a device queue and its counters; one operation at a time)
//!  ├─ page cache (all files) and block allocator
//!  ├─ journal (the log, checkpoints), for a filesystem on disk
//!  └─ the device
//! ```
//!
//! - `config`: settings; `shared`: the state every session shares;
//!   `mount`: assembly (in memory, format, recovery); `namespace`: the
//!   operations on the tree (`persist::tree`, which replay shares); `file`,
//!   `ops`, `file_io`: handles and their operations; `session`: the context
//!   operations run in; `lender`: the sessions `File`'s own methods borrow,
//!   owned by the mount's handles; `read`,
//!   `write`, `size`, `allocate`, `sync_data`, `commit`: the I/O paths;
//!   `home`: writing logged pages home off the sync path, a step any
//!   session can drive, and `background`: that step offered to a driver
//!   the caller names (the engine starts no thread); `pause`: keeping the
//!   background step paused (for an invariant check); `check`: the
//!   invariant checker; `posix`: the POSIX policy every front end uses
//!   (owners, modes, ACLs, access, set-id bits), applied under the
//!   namespace lock when it decides what a new inode gets.

mod allocate;
pub mod background;
mod check;
mod commit;
mod config;
#[cfg(feature = "std")]
mod cursor;
mod direct;
mod file;
#[cfg(feature = "std")]
mod file_io;
mod held;
mod home;
pub(crate) mod inode;
#[cfg(feature = "std")]
mod lender;
mod mount;
mod namespace;
mod ops;
mod pause;
pub mod posix;
mod read;
mod session;
mod shared;
mod size;
mod statfs;
mod sync_data;
mod volatile;
mod write;
mod xattr;

use alloc::sync::Arc;

pub use allocate::Allocate;
pub use check::InvariantError;
pub use config::Config;
#[cfg(feature = "std")]
pub use cursor::FileCursor;
pub use file::{File, Metadata};
pub use held::HeldDir;
#[cfg(all(test, loom))]
use inode::Inode;
pub use namespace::{Created, DirEntry, NewInode, RenameFlags, SetAttr};
pub use pause::Paused;
pub use session::Session;
pub(crate) use shared::Shared;
pub use statfs::StatFs;
pub use xattr::XattrMode;

use crate::cache::PageCache;
use crate::dev::{BlockDevice, FrameArena, Geometry};
use crate::error::Result;
use crate::stats::Stats;

pub use crate::persist::record::Kind;
pub use crate::units::{InodeId, MAX_FILE_SIZE, MAX_NAME_LEN};

/// A mounted filesystem. Cheap to clone and `Send + Sync`: share it between
/// threads. It holds the namespace operations (create, open, remove,
/// rename, list); files are [`File`] handles.
#[derive(Debug)]
pub struct Fs<D: BlockDevice> {
    pub(crate) shared: Arc<Shared<D>>,
    /// Shared by every `Fs` and `File` of this mount: when the last goes,
    /// so does every session kept for lending.
    handles: Arc<Handles<D>>,
}

impl<D: BlockDevice> Clone for Fs<D> {
    fn clone(&self) -> Self {
        Fs {
            shared: self.shared.clone(),
            handles: self.handles.clone(),
        }
    }
}

/// What the user's handles on a mount own together.
#[derive(Debug)]
struct Handles<D: BlockDevice> {
    /// The sessions `File`'s own methods borrow (hosted builds).
    #[cfg(feature = "std")]
    lender: lender::Lender<D>,
    /// The driver of the log's background steps ([`Config::background`]),
    /// stopped when the last handle goes.
    _background: Option<background::BackgroundDriver>,
    #[cfg(not(feature = "std"))]
    _device: core::marker::PhantomData<D>,
}

impl<D: BlockDevice> Handles<D> {
    fn new(shared: &Arc<Shared<D>>) -> Handles<D> {
        Handles {
            #[cfg(feature = "std")]
            lender: lender::Lender::new(),
            _background: background::start(shared),
            #[cfg(not(feature = "std"))]
            _device: core::marker::PhantomData,
        }
    }
}

/// A bare inode, for the loom models of its primitives.
#[cfg(all(test, loom))]
pub(crate) fn inode_for_tests() -> Inode {
    Inode::new(InodeId(1))
}

impl<D: BlockDevice> Fs<D> {
    /// Makes every file's written data and every change to sizes, extents
    /// and names durable, in one commit. Uses a session of its own; a
    /// thread that has one can call [`Session::sync_all_files`] instead.
    pub fn sync(&self) -> Result<()> {
        self.with_session(|s| s.sync_all_files())
    }

    /// Makes directory `dir`'s entries durable (`fsync` of a directory):
    /// one commit of every namespace change made so far, and of the
    /// directory's own attributes if they changed.
    pub fn sync_dir(&self, dir: InodeId) -> Result<()> {
        self.with_session(|s| s.sync_dir(dir))
    }

    /// Runs `f` in a session: on a hosted build the calling thread's, lent;
    /// otherwise a new one.
    fn with_session<R>(&self, f: impl FnOnce(&Session<D>) -> Result<R>) -> Result<R> {
        #[cfg(feature = "std")]
        {
            let lent = lender::lend(self)?;
            f(&lent)
        }
        #[cfg(not(feature = "std"))]
        {
            f(&self.session()?)
        }
    }

    /// Syncs everything (as [`Fs::sync`]) and writes a checkpoint, so the
    /// next mount has no log to replay. Dropping an `Fs` without this (or
    /// without syncing) keeps only what was synced: the rest is lost, as
    /// with a power cut. Other clones of this `Fs`, and files still open,
    /// keep working; what they change afterwards needs another sync.
    pub fn unmount(self) -> Result<()> {
        let session = self.session()?;
        session.block_on(session.write_home())?;
        session.sync_all_files()?;
        session.checkpoint()
    }

    /// A new session with its own device queue, for running operations in
    /// explicitly (`session.read_at(&file, ..)`). Use one per thread.
    pub fn session(&self) -> Result<Session<D>> {
        Session::open(self.shared.clone())
    }

    /// The device's geometry.
    pub fn geometry(&self) -> Geometry {
        self.shared.geometry
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.shared.dev
    }

    /// Counters summed over every session so far.
    pub fn stats(&self) -> Stats {
        let all = self.shared.counters.lock();
        let mut s = all.1;
        for c in &all.0 {
            c.add_to(&mut s);
        }
        s
    }

    /// Says whether the caller drives [`Session::background_step`] (from an
    /// idle loop, say) often enough to checkpoint the log: then commits
    /// leave checkpoints to it and write one themselves only if the log
    /// passes three quarters full. A driver named in
    /// [`Config::background`] turns this on while it runs.
    pub fn set_background_steps(&self, on: bool) {
        self.shared.journal.set_background(on);
    }

    /// Free blocks on the device.
    pub fn free_blocks(&self) -> u64 {
        self.shared.space.lock().free_blocks()
    }

    /// Log blocks in use (written since the last checkpoint), and the
    /// log's size in blocks: a checkpoint is written past half. Both are 0
    /// for a filesystem with no log.
    pub fn log_fill(&self) -> (u64, u64) {
        self.shared.journal.fill()
    }

    /// Inodes in memory now (of the [`StatFs::inodes`] that exist). On a
    /// filesystem with a log an inode is built when first asked for and
    /// leaves memory again once it is idle, logged, uncached and equal
    /// to the durable view ([`Config::idle_inodes`]).
    pub fn inodes_in_memory(&self) -> u64 {
        self.shared.inodes.read().len() as u64
    }

    /// Dirty pages in the cache.
    pub fn dirty_pages(&self) -> u64 {
        self.shared.cache.dirty_pages()
    }

    /// Page-cache capacity in pages.
    pub fn cache_pages(&self) -> u32 {
        self.shared.cache.capacity()
    }

    /// Bytes of cache bookkeeping per cached page.
    pub fn metadata_bytes_per_page(&self) -> usize {
        PageCache::metadata_bytes_per_page()
    }

    /// Checks that extent maps and the allocator agree: no block owned twice
    /// or both owned and free, nothing leaked, no cached page past EOF,
    /// dirty counts consistent. Run it when none of the caller's
    /// operations is in flight; it pauses the background step itself
    /// ([`Fs::pause_background`]).
    pub fn check_invariants(&self) -> core::result::Result<(), InvariantError> {
        let _paused = self.pause_background();
        check::run(&self.shared)
    }

    /// Pauses the log's background step ([`Session::background_step`],
    /// which the hosted log thread drives): waits for a step in progress
    /// to end, and keeps new ones from starting until the returned guard
    /// drops (they return 0 meanwhile). Syncs go on; past three quarters
    /// of the log they checkpoint themselves. Do not call it from a thread
    /// in the middle of driving a step: it would wait for itself.
    pub fn pause_background(&self) -> Paused<'_> {
        self.shared.background.pause(self.shared.config.idle)
    }

    /// The frames' arena (for tools that look at cached bytes).
    pub fn frame_count(&self) -> u32 {
        self.shared.frames().frame_count()
    }
}
