//! The file API: a mounted filesystem, per-thread sessions, and files.
//!
//! ```text
//! Fs (shared, Send + Sync)
//!  ├─ Session (one per thread: owns a device queue and its counters)
//!  │   └─ File (a handle borrowed from the session: read_at, write_at, ...)
//!  ├─ names -> inodes (flat namespace)
//!  ├─ page cache (all files) and block allocator
//!  └─ the device
//! ```

mod check;
mod commit;
#[cfg(feature = "std")]
mod cursor;
mod file;
pub(crate) mod inode;
mod io;
#[cfg(feature = "std")]
mod lend;
mod ops;
mod read;
mod size;
mod sync_data;
mod write;

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

pub use check::InvariantError;
#[cfg(feature = "std")]
pub use cursor::FileCursor;
pub use file::{File, Metadata};
use inode::Inode;
pub use io::Session;

use crate::cache::PageCache;
use crate::dev::{BlockDevice, FrameArena, Geometry};
use crate::error::{NameError, NamespaceError, Result};
use crate::persist::record::{file_image_len, Record};
use crate::persist::{Journal, PendingFree};
use crate::space::{Allocator, MetaChange, MetaSink};
use crate::stats::{Counters, Stats};
use crate::sync::{Mutex, RwLock};
use crate::units::{BlockNo, InodeId, Nanos};
use crate::Error;

pub use crate::units::{MAX_FILE_SIZE, MAX_NAME_LEN};

/// Engine settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Page-cache capacity in 4 KiB pages; 0 means every frame the device
    /// offers. Must not exceed the device's frames.
    pub cache_pages: u32,
    /// Dirty pages allowed before writers are made to write back; 0 means
    /// half the cache.
    pub dirty_limit_pages: u32,
    /// Largest readahead window in pages; 0 turns readahead off.
    pub readahead_pages: u32,
    /// Serialise every operation on a file with a file-wide lock, as
    /// filesystems did before range locking (for comparisons).
    pub file_lock: bool,
    /// Monotonic time, passed to device polling for command timeouts.
    pub clock: fn() -> Nanos,
    /// Called while an operation waits (for a lock, a page or the device):
    /// a spin hint by default; hosted users may yield the thread.
    pub idle: fn(),
    /// Called when a future waits for a device completion under an executor
    /// other than the synchronous methods' loop, with the task's waker and
    /// how many times this wait has been polled: it must wake the waker
    /// when the device queue is worth polling again. The default wakes it
    /// at once (busy polling); `hosted::config` spins briefly, then wakes
    /// it from a timer with growing delays.
    pub park: fn(&core::task::Waker, u32),
}

fn no_clock() -> Nanos {
    Nanos(0)
}

fn wake_now(waker: &core::task::Waker, _polls: u32) {
    waker.wake_by_ref();
}

impl Default for Config {
    fn default() -> Config {
        Config {
            cache_pages: 0,
            dirty_limit_pages: 0,
            readahead_pages: 256,
            file_lock: false,
            clock: no_clock,
            idle: core::hint::spin_loop,
            park: wake_now,
        }
    }
}

/// Numbers mounted filesystems, so lent sessions know whose they are.
static NEXT_FS_ID: AtomicU64 = AtomicU64::new(1);

/// State shared by every session of one mounted filesystem.
pub(crate) struct Shared<D: BlockDevice> {
    /// This mount's number.
    pub(crate) id: u64,
    /// Every handle on the mount is gone: lent sessions are dropped.
    pub(crate) closed: core::sync::atomic::AtomicBool,
    /// Sessions given back by operations that ended on a thread that
    /// already had one (hosted builds).
    #[cfg(feature = "std")]
    pub(crate) pool: Mutex<Vec<Session<D>>>,
    pub(crate) dev: D,
    pub(crate) geometry: Geometry,
    pub(crate) config: Config,
    pub(crate) dirty_limit: u64,
    pub(crate) cache: PageCache,
    /// Leaf lock, taken after an inode's extent lock when both are needed.
    pub(crate) space: Mutex<Allocator>,
    names: RwLock<BTreeMap<String, InodeId>>,
    /// Every live inode: named, or unlinked but still open.
    inodes: RwLock<BTreeMap<InodeId, Arc<Inode>>>,
    next_ino: AtomicU64,
    /// Live sessions' counters, and the sum of closed sessions'.
    counters: Mutex<(Vec<Arc<Counters>>, Stats)>,
    sink: Option<Arc<dyn MetaSink>>,
    /// The metadata log, for a filesystem on disk (`Fs::format`/`mount`).
    pub(crate) journal: Option<Journal>,
    /// Frames kept out of the cache for metadata I/O.
    pub(crate) meta_frames: core::ops::Range<u32>,
    /// Bytes a checkpoint of the in-memory metadata would take (the sum of
    /// every live inode's `meta_len`): blocks for it are held back from
    /// data, so a checkpoint always finds room.
    meta_bytes: AtomicU64,
}

impl<D: BlockDevice> core::fmt::Debug for Shared<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Fs")
            .field("geometry", &self.geometry)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<D: BlockDevice> Shared<D> {
    pub(crate) fn frames(&self) -> &D::Frames {
        self.dev.frames()
    }

    /// Applies the side effects of a metadata change: the sink sees it,
    /// the inode (if given) remembers it needs logging, and namespace
    /// changes wait in the journal for the next commit.
    pub(crate) fn record(&self, inode: Option<&Inode>, change: MetaChange<'_>) {
        if let Some(sink) = &self.sink {
            sink.record(&change);
        }
        if let Some(inode) = inode {
            inode.meta_changed();
        }
        if let Some(j) = &self.journal {
            let record = match change {
                MetaChange::Create { ino, name } => Record::Create {
                    ino: ino.0,
                    name: name.to_string(),
                },
                MetaChange::Remove { ino } => Record::Remove { ino: ino.0 },
                MetaChange::Rename { ino, to } => Record::Rename {
                    ino: ino.0,
                    to: to.to_string(),
                },
                _ => return,
            };
            j.stage(record);
        }
    }

    /// Recomputes `inode`'s share of [`Shared::meta_bytes`] after its name
    /// or extent count changed (or it was reclaimed: `gone`).
    pub(crate) fn meta_len_changed(&self, inode: &Inode, extents: usize, gone: bool) {
        let len = if gone {
            0
        } else {
            file_image_len(inode.name_len.load(Ordering::Relaxed) as usize, extents)
        };
        let old = inode.meta_len.swap(len, Ordering::AcqRel);
        if len >= old {
            self.meta_bytes.fetch_add(len - old, Ordering::AcqRel);
        } else {
            self.meta_bytes.fetch_sub(old - len, Ordering::AcqRel);
        }
    }

    /// Free blocks data may not take: room for a checkpoint of everything
    /// durable plus everything that may become so (with a journal).
    pub(crate) fn meta_reserve(&self, extra_bytes: u64) -> u64 {
        self.journal.as_ref().map_or(0, |j| {
            let bytes =
                self.meta_bytes.load(Ordering::Acquire) + j.durable_image_len() + extra_bytes;
            // Worst case: free space so fragmented that every frame is one
            // block.
            let per_block = crate::persist::format::Frame::capacity(1) as u64;
            bytes.div_ceil(per_block) + 2
        })
    }

    /// One block for file data near `hint`, unless only the blocks held
    /// back for metadata are left.
    pub(crate) fn alloc_data(&self, hint: BlockNo) -> Option<BlockNo> {
        let reserve = self.meta_reserve(0);
        let mut space = self.space.lock();
        if space.free_blocks() <= reserve {
            return None;
        }
        space.alloc(hint, 1).map(|(b, _)| b)
    }

    /// True if blocks freed by remove, truncate or punch-hole wait for a
    /// commit before they can be reused.
    pub(crate) fn frees_held(&self) -> bool {
        self.journal.as_ref().is_some_and(|j| j.held_blocks() > 0)
    }

    /// Returns blocks to the allocator, or, with a journal, holds them
    /// until no durable record references them.
    pub(crate) fn free_extents(&self, inode: &Inode, freed: &[crate::space::Extent]) {
        let seq = inode.meta_seq.load(Ordering::Acquire);
        for e in freed {
            let pf = PendingFree {
                ino: inode.id.0,
                dev: e.dev,
                len: e.len,
                seq,
            };
            if !self.journal.as_ref().is_some_and(|j| j.hold_free(pf)) {
                // A failure means the maps disagree; the invariant checker
                // reports it.
                let _ = self.space.lock().free(e.dev, e.len);
            }
        }
    }

    /// Adds a new session's counters; returns a number for the session.
    pub(crate) fn register_counters(&self, counters: &Arc<Counters>) -> usize {
        let mut all = self.counters.lock();
        all.0.push(counters.clone());
        all.0.len()
    }

    /// Folds a closing session's counters into the closed sessions' sum,
    /// so that opening sessions over and over does not grow a list.
    pub(crate) fn retire_counters(&self, counters: &Arc<Counters>) {
        let mut all = self.counters.lock();
        if let Some(i) = all.0.iter().position(|c| Arc::ptr_eq(c, counters)) {
            all.0.swap_remove(i);
            counters.add_to(&mut all.1);
        }
    }

    /// The live inode `ino`.
    pub(crate) fn inode(&self, ino: InodeId) -> Option<Arc<Inode>> {
        self.inodes.read().get(&ino).cloned()
    }

    /// Every live inode that can be opened, each with an open reference
    /// taken (release with [`Shared::close`]).
    pub(crate) fn open_inodes(&self) -> Vec<Arc<Inode>> {
        self.inodes
            .read()
            .values()
            .filter(|i| i.try_open())
            .cloned()
            .collect()
    }

    /// Live inodes with dirty pages, most dirty first, each with an open
    /// reference taken (release with [`Shared::close`]).
    pub(crate) fn dirty_inodes(&self) -> Vec<Arc<Inode>> {
        let mut v: Vec<Arc<Inode>> = self
            .inodes
            .read()
            .values()
            .filter(|i| i.dirty.load(Ordering::Relaxed) > 0 && i.try_open())
            .cloned()
            .collect();
        v.sort_by_key(|i| core::cmp::Reverse(i.dirty.load(Ordering::Relaxed)));
        v
    }

    /// Drops an open reference; the last one on an unlinked file frees its
    /// pages and blocks. Nothing can be in flight on the file then: every
    /// operation and every writeback holds an open reference.
    pub(crate) fn close(&self, inode: &Inode) {
        let prev = inode.open.fetch_sub(1, Ordering::AcqRel);
        if prev == 1 && inode.unlinked.load(Ordering::Acquire) {
            self.reclaim(inode);
        }
    }

    fn reclaim(&self, inode: &Inode) {
        if inode.reclaimed.swap(true, Ordering::AcqRel) {
            return;
        }
        loop {
            let mut cached = Vec::new();
            self.cache.scan(
                &inode.pages,
                inode.id,
                crate::units::PageIndex(0),
                crate::units::PageIndex(u64::MAX),
                |i, _, _| cached.push(i),
            );
            if cached.is_empty() {
                break;
            }
            for index in cached {
                // Only an evictor's momentary claim can make a page busy
                // here; retry until it lets go.
                let _ = self.cache.invalidate(&inode.pages, inode.id, index);
            }
        }
        let freed = inode.extents.write().remove(0, u64::MAX);
        inode.meta_changed();
        self.meta_len_changed(inode, 0, true);
        self.free_extents(inode, &freed);
        self.inodes.write().remove(&inode.id);
    }
}

/// A mounted filesystem. Cheap to clone and `Send + Sync`: share it between
/// threads. It holds the namespace operations (create, open, remove,
/// rename, list); files are [`File`] handles.
#[derive(Debug)]
pub struct Fs<D: BlockDevice> {
    pub(crate) shared: Arc<Shared<D>>,
    /// Shared by every `Fs` and `File` of this mount: when the last goes,
    /// sessions kept for lending are dropped.
    _handles: Arc<Handles<D>>,
}

impl<D: BlockDevice> Clone for Fs<D> {
    fn clone(&self) -> Self {
        Fs {
            shared: self.shared.clone(),
            _handles: self._handles.clone(),
        }
    }
}

/// The user's handles on a mount, counted.
#[derive(Debug)]
struct Handles<D: BlockDevice>(Arc<Shared<D>>);

impl<D: BlockDevice> Drop for Handles<D> {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        #[cfg(feature = "std")]
        {
            // Pooled sessions hold the mount: let them go.
            let pooled = core::mem::take(&mut *self.0.pool.lock());
            drop(pooled);
            lend::forget(self.0.id);
        }
    }
}

/// The frames kept for metadata I/O: the last `META_FRAMES` of the arena.
fn meta_frames<D: BlockDevice>(dev: &D) -> Result<core::ops::Range<u32>> {
    let frames = dev.frames().frame_count();
    let meta = frames
        .checked_sub(crate::persist::META_FRAMES)
        .filter(|&m| m >= 4)
        .ok_or(Error::Config(
            "the device needs more DMA frames (metadata I/O keeps 32)",
        ))?;
    Ok(meta..frames)
}

/// A bare inode, for the loom models of its primitives.
#[cfg(all(test, loom))]
pub(crate) fn inode_for_tests() -> Inode {
    Inode::new(InodeId(1))
}

fn check_name(name: &str) -> core::result::Result<(), NameError> {
    if name.is_empty() {
        Err(NameError::Empty)
    } else if name.len() > MAX_NAME_LEN {
        Err(NameError::TooLong)
    } else if name.bytes().any(|b| b == 0 || b == b'/') {
        Err(NameError::BadByte)
    } else {
        Ok(())
    }
}

impl<D: BlockDevice> Fs<D> {
    /// Starts an empty in-memory filesystem on `dev`.
    pub fn new(dev: D, config: Config) -> Result<Fs<D>> {
        Fs::with_sink(dev, config, None)
    }

    /// Like [`Fs::new`], reporting every metadata change to `sink`.
    pub fn with_sink(dev: D, config: Config, sink: Option<Arc<dyn MetaSink>>) -> Result<Fs<D>> {
        let frames = dev.frames().frame_count();
        let blocks = dev.geometry().capacity_pages();
        Fs::build(dev, config, frames, sink, (0, blocks), None)
    }

    /// Makes every file's written data and every change to sizes, extents
    /// and names durable, in one commit. Uses a session of its own; a
    /// thread that has one can call [`Session::sync_all_files`] instead.
    pub fn sync(&self) -> Result<()> {
        self.session()?.sync_all_files()
    }

    /// Syncs everything (as [`Fs::sync`]) and writes a checkpoint, so the
    /// next mount has no log to replay. Dropping an `Fs` without this (or
    /// without syncing) keeps only what was synced: the rest is lost, as
    /// with a power cut. Other clones of this `Fs`, and files still open,
    /// keep working; what they change afterwards needs another sync.
    pub fn unmount(self) -> Result<()> {
        let session = self.session()?;
        session.sync_all_files()?;
        session.checkpoint()
    }

    /// The shared constructor: `usable_frames` frames are the cache's to
    /// take, blocks `[data.0, data.1)` the allocator's.
    fn build(
        dev: D,
        config: Config,
        usable_frames: u32,
        sink: Option<Arc<dyn MetaSink>>,
        data: (u64, u64),
        journal: Option<Journal>,
    ) -> Result<Fs<D>> {
        let frames = dev.frames().frame_count();
        let meta_frames = usable_frames.min(frames)..frames;
        let geometry = dev.geometry();
        geometry.validate()?;
        let cache_pages = if config.cache_pages == 0 {
            usable_frames
        } else {
            config.cache_pages
        };
        if cache_pages > usable_frames {
            return Err(Error::Config(
                "cache_pages exceeds the device's DMA frames (less those kept for metadata)",
            ));
        }
        if cache_pages < 4 {
            return Err(Error::Config("the page cache needs at least 4 pages"));
        }
        let dirty_limit = match config.dirty_limit_pages {
            0 => cache_pages / 2,
            n => n.min(cache_pages.saturating_sub(2)).max(1),
        };
        let shared = Arc::new(Shared {
            id: NEXT_FS_ID.fetch_add(1, Ordering::Relaxed),
            closed: core::sync::atomic::AtomicBool::new(false),
            #[cfg(feature = "std")]
            pool: Mutex::new(Vec::new()),
            dev,
            geometry,
            config,
            dirty_limit: u64::from(dirty_limit),
            cache: PageCache::new(cache_pages),
            space: Mutex::new(Allocator::new(BlockNo(data.0), BlockNo(data.1))),
            names: RwLock::new(BTreeMap::new()),
            inodes: RwLock::new(BTreeMap::new()),
            next_ino: AtomicU64::new(1),
            counters: Mutex::new((Vec::new(), Stats::default())),
            sink,
            journal,
            meta_frames,
            meta_bytes: AtomicU64::new(0),
        });
        Ok(Fs {
            _handles: Arc::new(Handles(shared.clone())),
            shared,
        })
    }

    /// Writes an empty filesystem on `dev` and mounts it. `uuid` tells this
    /// filesystem's log records from any an earlier one left on the device.
    pub fn format(dev: D, config: Config, uuid: u64) -> Result<Fs<D>> {
        let frames = meta_frames(&dev)?;
        crate::persist::format_device(&dev, frames, config.clock, config.idle, uuid)?;
        Fs::mount(dev, config)
    }

    /// Mounts the filesystem on `dev`, recovering it from its checkpoint and
    /// log. Recovery writes nothing; a damaged image is an error naming the
    /// block and the damage.
    pub fn mount(dev: D, config: Config) -> Result<Fs<D>> {
        let frames = meta_frames(&dev)?;
        let rec =
            crate::persist::recover_for_mount(&dev, frames.clone(), config.clock, config.idle)?;
        let journal = Journal::open(&rec);
        let layout = journal.layout();
        let fs = Fs::build(
            dev,
            config,
            frames.start,
            None,
            (layout.data_start, layout.blocks),
            Some(journal),
        )?;
        let shared = &fs.shared;
        {
            let mut names = shared.names.write();
            let mut inodes = shared.inodes.write();
            let mut space = shared.space.lock();
            let overlap = |block| Error::Corrupt {
                block,
                damage: crate::error::Damage::Inconsistent { problems: 1 },
            };
            for &(block, len) in &rec.chain {
                space
                    .reserve(BlockNo(block), len)
                    .map_err(|_| overlap(block))?;
            }
            let mut next = 1;
            for (&ino, f) in &rec.shadow.files {
                // Recovery checked the records: inode numbers are at most
                // MAX_INODE, extents are in the data area and disjoint.
                let inode = Inode::new(InodeId(ino));
                inode.size.store(f.size, Ordering::Release);
                inode.name_len.store(f.name.len() as u32, Ordering::Relaxed);
                {
                    let mut ext = inode.extents.write();
                    for x in &f.extents {
                        if !ext.insert(x.file_block, x.dev, x.len)
                            || space.reserve(x.dev, x.len).is_err()
                        {
                            return Err(overlap(x.dev.0));
                        }
                    }
                    shared.meta_len_changed(&inode, ext.len(), false);
                }
                names.insert(f.name.clone(), InodeId(ino));
                inodes.insert(InodeId(ino), Arc::new(inode));
                next = next.max(ino + 1);
            }
            shared.next_ino.store(next, Ordering::Relaxed);
        }
        Ok(fs)
    }

    /// A new session with its own device queue, for running operations in
    /// explicitly (`session.read_at(&file, ..)`). Use one per thread.
    pub fn session(&self) -> Result<Session<D>> {
        Session::open(self.shared.clone())
    }

    /// Creates `name`, which must not exist, and opens it.
    pub fn create(&self, name: &str) -> Result<File<D>> {
        let inode = self.create_inode(name)?;
        Ok(File::new(self.clone(), inode))
    }

    /// Opens the existing file `name`.
    pub fn open(&self, name: &str) -> Result<File<D>> {
        let inode = self.open_inode(name)?;
        Ok(File::new(self.clone(), inode))
    }

    /// Opens `name`, creating it if it does not exist.
    pub fn open_or_create(&self, name: &str) -> Result<File<D>> {
        match self.open(name) {
            Err(Error::Namespace(NamespaceError::NotFound)) => self.create(name),
            other => other,
        }
    }

    /// True if a file is named `name`.
    pub fn exists(&self, name: &str) -> bool {
        self.shared.names.read().contains_key(name)
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

    /// Free blocks on the device.
    pub fn free_blocks(&self) -> u64 {
        self.shared.space.lock().free_blocks()
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

    /// File names, sorted.
    pub fn list(&self) -> Vec<String> {
        self.shared.names.read().keys().cloned().collect()
    }

    /// Removes `name`. Open handles keep working; the blocks are freed when
    /// the last one closes.
    pub fn remove(&self, name: &str) -> Result<()> {
        check_name(name)?;
        let ino = self
            .shared
            .names
            .write()
            .remove(name)
            .ok_or(NamespaceError::NotFound)?;
        self.shared.record(None, MetaChange::Remove { ino });
        self.unlink(ino);
        Ok(())
    }

    /// Every file name with its inode number, sorted by name.
    pub fn entries(&self) -> Vec<(String, u64)> {
        self.shared
            .names
            .read()
            .iter()
            .map(|(n, i)| (n.clone(), i.0))
            .collect()
    }

    /// The inode number of `name`.
    pub fn lookup(&self, name: &str) -> Result<u64> {
        check_name(name)?;
        self.shared
            .names
            .read()
            .get(name)
            .map(|i| i.0)
            .ok_or(NamespaceError::NotFound.into())
    }

    /// Opens the file with inode number `ino`, named or not (an unlinked
    /// file still open elsewhere can be opened again by number).
    pub fn open_ino(&self, ino: u64) -> Result<File<D>> {
        let inode = self
            .shared
            .inode(InodeId(ino))
            .filter(|i| i.try_open())
            .ok_or(NamespaceError::NotFound)?;
        Ok(File::new(self.clone(), inode))
    }

    /// Renames `from` to `to` atomically, replacing any file named `to`.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.rename_inner(from, to, true)
    }

    /// Renames `from` to `to` atomically, failing with
    /// [`NamespaceError::Exists`] if `to` exists (`RENAME_NOREPLACE`).
    pub fn rename_noreplace(&self, from: &str, to: &str) -> Result<()> {
        self.rename_inner(from, to, false)
    }

    fn rename_inner(&self, from: &str, to: &str, replace: bool) -> Result<()> {
        check_name(from)?;
        check_name(to)?;
        let replaced = {
            let mut names = self.shared.names.write();
            let ino = *names.get(from).ok_or(NamespaceError::NotFound)?;
            if !replace && names.contains_key(to) {
                return Err(NamespaceError::Exists.into());
            }
            if from == to {
                return Ok(());
            }
            names.remove(from);
            let replaced = names.insert(to.to_string(), ino);
            self.shared.record(None, MetaChange::Rename { ino, to });
            if let Some(inode) = self.shared.inodes.read().get(&ino) {
                inode.name_len.store(to.len() as u32, Ordering::Relaxed);
                let extents = inode.extents.read().len();
                self.shared.meta_len_changed(inode, extents, false);
            }
            replaced
        };
        if let Some(old) = replaced {
            self.shared.record(None, MetaChange::Remove { ino: old });
            self.unlink(old);
        }
        Ok(())
    }

    fn unlink(&self, ino: InodeId) {
        let inode = self.shared.inodes.read().get(&ino).cloned();
        if let Some(inode) = inode {
            inode.unlinked.store(true, Ordering::Release);
            // Take and drop a reference: reclaims now if nobody has it open.
            inode.open.fetch_add(1, Ordering::AcqRel);
            self.shared.close(&inode);
        }
    }

    pub(crate) fn create_inode(&self, name: &str) -> Result<Arc<Inode>> {
        check_name(name)?;
        let mut names = self.shared.names.write();
        if names.contains_key(name) {
            return Err(NamespaceError::Exists.into());
        }
        // A new file grows the next checkpoint: refuse it, as a full
        // device, if the blocks held back for metadata could not hold it.
        let grows = file_image_len(name.len(), 0);
        if self.shared.space.lock().free_blocks() < self.shared.meta_reserve(grows) {
            return Err(crate::error::SpaceError::DeviceFull.into());
        }
        let ino = self.shared.next_ino.fetch_add(1, Ordering::Relaxed);
        if ino > crate::units::MAX_INODE {
            return Err(crate::error::SpaceError::InodeNumbers.into());
        }
        let ino = InodeId(ino);
        let inode = Arc::new(Inode::new(ino));
        inode.name_len.store(name.len() as u32, Ordering::Relaxed);
        self.shared.meta_len_changed(&inode, 0, false);
        inode.open.fetch_add(1, Ordering::AcqRel);
        self.shared.inodes.write().insert(ino, inode.clone());
        names.insert(name.to_string(), ino);
        self.shared.record(None, MetaChange::Create { ino, name });
        Ok(inode)
    }

    pub(crate) fn open_inode(&self, name: &str) -> Result<Arc<Inode>> {
        check_name(name)?;
        let names = self.shared.names.read();
        let ino = names.get(name).ok_or(NamespaceError::NotFound)?;
        let inode = self
            .shared
            .inodes
            .read()
            .get(ino)
            .cloned()
            .ok_or(NamespaceError::NotFound)?;
        // Holding the names lock: the file cannot be unlinked meanwhile.
        inode.open.fetch_add(1, Ordering::AcqRel);
        Ok(inode)
    }

    /// Checks that extent maps and the allocator agree: no block owned twice
    /// or both owned and free, nothing leaked, no cached page past EOF,
    /// dirty counts consistent. Run it when no operation is in flight.
    pub fn check_invariants(&self) -> core::result::Result<(), InvariantError> {
        check::run(&self.shared)
    }

    /// The frames' arena (for tools that look at cached bytes).
    pub fn frame_count(&self) -> u32 {
        self.shared.frames().frame_count()
    }
}
