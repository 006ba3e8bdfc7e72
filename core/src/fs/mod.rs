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
mod file;
pub(crate) mod inode;
mod io;
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
pub use file::File;
use inode::Inode;
pub use io::Session;

use crate::cache::PageCache;
use crate::dev::{BlockDevice, FrameArena, Geometry};
use crate::error::{NameError, NamespaceError, Result};
use crate::persist::record::Record;
use crate::persist::{Journal, PendingFree};
use crate::space::{Allocator, MetaChange, MetaSink};
use crate::stats::{Counters, Stats};
use crate::sync::{Mutex, RwLock};
use crate::units::{BlockNo, InodeId, Nanos, PAGE_SIZE};
use crate::Error;

/// Longest file name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Largest file size, in bytes (2^32 pages of 4 KiB: 16 TiB).
pub const MAX_FILE_SIZE: u64 = crate::cache::radix::MAX_PAGES * PAGE_SIZE as u64;

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
}

fn no_clock() -> Nanos {
    Nanos(0)
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
        }
    }
}

/// State shared by every session of one mounted filesystem.
pub(crate) struct Shared<D: BlockDevice> {
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
    counters: Mutex<Vec<Arc<Counters>>>,
    sink: Option<Arc<dyn MetaSink>>,
    /// The metadata log, for a filesystem on disk (`Fs::format`/`mount`).
    pub(crate) journal: Option<Journal>,
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
            j.st.lock().pending_ns.push(record);
        }
    }

    /// Returns blocks to the allocator, or, with a journal, holds them
    /// until no durable record references them.
    pub(crate) fn free_extents(&self, inode: &Inode, freed: &[crate::space::Extent]) {
        let seq = inode.meta_seq.load(Ordering::Acquire);
        let mut space = self.space.lock();
        let mut js = self.journal.as_ref().map(|j| j.st.lock());
        for e in freed {
            let pf = PendingFree {
                ino: inode.id.0,
                dev: e.dev,
                len: e.len,
                seq,
            };
            match js.as_mut() {
                Some(st) if !st.releasable(&pf) => st.pending_frees.push(pf),
                // A failure means the maps disagree; the invariant checker
                // reports it.
                _ => {
                    let _ = space.free(e.dev, e.len);
                }
            }
        }
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
        self.free_extents(inode, &freed);
        self.inodes.write().remove(&inode.id);
    }
}

/// A mounted filesystem. Cheap to clone; share it between threads and give
/// each thread its own [`Session`].
#[derive(Debug)]
pub struct Fs<D: BlockDevice> {
    shared: Arc<Shared<D>>,
}

impl<D: BlockDevice> Clone for Fs<D> {
    fn clone(&self) -> Self {
        Fs {
            shared: self.shared.clone(),
        }
    }
}

/// The frames kept for metadata I/O: the last `META_FRAMES` of the arena.
fn persist_frames<D: BlockDevice>(dev: &D) -> Result<(u32, u32)> {
    let frames = dev.frames().frame_count();
    let meta = frames
        .checked_sub(crate::persist::META_FRAMES)
        .filter(|&m| m >= 4)
        .ok_or(Error::Config(
            "the device needs more DMA frames (metadata I/O keeps 32)",
        ))?;
    Ok((meta, frames))
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
        Ok(Fs {
            shared: Arc::new(Shared {
                dev,
                geometry,
                config,
                dirty_limit: u64::from(dirty_limit),
                cache: PageCache::new(cache_pages),
                space: Mutex::new(Allocator::new(BlockNo(data.0), BlockNo(data.1))),
                names: RwLock::new(BTreeMap::new()),
                inodes: RwLock::new(BTreeMap::new()),
                next_ino: AtomicU64::new(1),
                counters: Mutex::new(Vec::new()),
                sink,
                journal,
            }),
        })
    }

    /// Writes an empty filesystem on `dev` and mounts it. `uuid` tells this
    /// filesystem's log records from any an earlier one left on the device.
    pub fn format(dev: D, config: Config, uuid: u64) -> Result<Fs<D>> {
        let (meta, frames) = persist_frames(&dev)?;
        let layout = crate::persist::format::Layout::for_blocks(dev.geometry().capacity_pages())
            .ok_or(Error::Config("the device is too small for a filesystem"))?;
        {
            let mut io =
                crate::persist::BlockIo::new(&dev, meta..frames, config.clock, config.idle)?;
            crate::persist::format(&mut io, layout, uuid, dev.geometry().block_size)?;
        }
        Fs::mount(dev, config)
    }

    /// Mounts the filesystem on `dev`, recovering it from its checkpoint and
    /// log. Recovery writes nothing; a damaged image is an error naming the
    /// block.
    pub fn mount(dev: D, config: Config) -> Result<Fs<D>> {
        let (meta, frames) = persist_frames(&dev)?;
        let rec = {
            let mut io =
                crate::persist::BlockIo::new(&dev, meta..frames, config.clock, config.idle)?;
            crate::persist::recover(&mut io, dev.geometry().capacity_pages(), true)?
        };
        let Some(sb) = rec.superblock else {
            return Err(Error::Corrupt {
                block: 0,
                what: "no superblock",
            });
        };
        if sb.lba_size != dev.geometry().block_size {
            return Err(Error::Corrupt {
                block: 0,
                what: "formatted with another device block size",
            });
        }
        let layout = sb.layout;
        let mut durable_seq = BTreeMap::new();
        for &ino in rec.shadow.files.keys() {
            durable_seq.insert(ino, 0);
        }
        let journal = Journal {
            layout,
            uuid: sb.uuid,
            lba_size: sb.lba_size,
            meta_frame: meta,
            commit_lock: crate::lock::RangeLock::new(crate::lock::Level::Inode),
            st: Mutex::new(crate::persist::JState {
                next_lsn: rec.last_lsn + 1,
                pos: rec.pos,
                head: sb.log_head,
                generation: sb.generation,
                ckpt_slot: sb.ckpt_slot,
                next_ticket: 1,
                durable_ticket: 0,
                queue: Vec::new(),
                pending_ns: Vec::new(),
                pending_frees: Vec::new(),
                durable_seq,
                removed: Default::default(),
                shadow: rec.shadow.clone(),
            }),
        };
        let fs = Fs::build(
            dev,
            config,
            meta,
            None,
            (layout.data_start, layout.blocks),
            Some(journal),
        )?;
        {
            let mut names = fs.shared.names.write();
            let mut inodes = fs.shared.inodes.write();
            let mut space = fs.shared.space.lock();
            let mut next = 1;
            for (&ino, f) in &rec.shadow.files {
                let inode = Inode::new(InodeId(ino));
                inode.size.store(f.size, Ordering::Release);
                {
                    let mut ext = inode.extents.write();
                    for x in &f.extents {
                        if !ext.insert(x.file_block, x.dev, x.len)
                            || space.reserve(x.dev, x.len).is_err()
                        {
                            return Err(Error::Corrupt {
                                block: x.dev.0,
                                what: "extent overlaps another",
                            });
                        }
                    }
                }
                names.insert(f.name.clone(), InodeId(ino));
                inodes.insert(InodeId(ino), Arc::new(inode));
                next = next.max(ino + 1);
            }
            fs.shared.next_ino.store(next, Ordering::Relaxed);
        }
        Ok(fs)
    }

    /// A new session with its own device queue. Use one per thread.
    pub fn session(&self) -> Result<Session<D>> {
        let counters = Arc::new(Counters::default());
        let id = {
            let mut all = self.shared.counters.lock();
            all.push(counters.clone());
            all.len()
        };
        Session::new(self.shared.clone(), counters, id)
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
        let mut s = Stats::default();
        for c in self.shared.counters.lock().iter() {
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

    /// Renames `from` to `to` atomically, replacing any file named `to`.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        check_name(from)?;
        check_name(to)?;
        let replaced = {
            let mut names = self.shared.names.write();
            let ino = *names.get(from).ok_or(NamespaceError::NotFound)?;
            if from == to {
                return Ok(());
            }
            names.remove(from);
            let replaced = names.insert(to.to_string(), ino);
            self.shared.record(None, MetaChange::Rename { ino, to });
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
        let ino = InodeId(self.shared.next_ino.fetch_add(1, Ordering::Relaxed));
        let inode = Arc::new(Inode::new(ino));
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
