//! Putting a filesystem together: in memory (`Fs::new`), on a freshly
//! formatted device (`Fs::format`), or from what recovery read back
//! (`Fs::mount`).

use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::inode::{durable_meta_len, Inode};
use super::{Config, Fs, Handles, Shared};
use crate::cache::PageCache;
use crate::dev::{BlockDevice, FrameArena};
use crate::error::{ConfigError, Damage, Error, Result};
use crate::persist::record::xattr_len;
use crate::persist::shadow::Shadow;
use crate::persist::tree::Tree;
use crate::persist::{Journal, Log};
use crate::space::Allocator;
use crate::stats::Stats;
use crate::sync::{Mutex, RwLock};
use crate::units::{BlockNo, InodeId, ROOT_INO};

/// The fewest pages the page cache works with.
const MIN_CACHE_PAGES: u32 = 4;

/// The frames kept for metadata I/O: the last `META_FRAMES` of the arena.
fn meta_frames<D: BlockDevice>(dev: &D) -> Result<core::ops::Range<u32>> {
    let frames = dev.frames().frame_count();
    let meta = frames
        .checked_sub(crate::persist::META_FRAMES)
        .filter(|&m| m >= MIN_CACHE_PAGES)
        .ok_or(Error::Config(ConfigError::FewFrames {
            frames,
            metadata: crate::persist::META_FRAMES,
            needed: MIN_CACHE_PAGES,
        }))?;
    Ok(meta..frames)
}

impl<D: BlockDevice> Fs<D> {
    /// Starts an empty in-memory filesystem on `dev` (nothing is written to
    /// it but file data; nothing survives a restart).
    pub fn new(dev: D, config: Config) -> Result<Fs<D>> {
        let frames = dev.frames().frame_count();
        let blocks = dev.geometry().capacity_pages();
        let (uid, gid) = config.root_owner;
        let now = (config.wall_clock)();
        let shared = Fs::build(dev, config, frames, (0, blocks), Journal::in_memory())?;
        Fs::load(&shared, &Shadow::empty(uid, gid, now), &[])?;
        Ok(Fs::start(shared))
    }

    /// The shared constructor: `usable_frames` frames are the cache's to
    /// take, blocks `[data.0, data.1)` the allocator's. Nothing runs on
    /// the state yet: see [`Fs::start`].
    fn build(
        dev: D,
        config: Config,
        usable_frames: u32,
        data: (u64, u64),
        journal: Journal,
    ) -> Result<Arc<Shared<D>>> {
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
            return Err(Error::Config(ConfigError::CacheBeyondFrames {
                cache_pages,
                usable: usable_frames,
            }));
        }
        if cache_pages < MIN_CACHE_PAGES {
            return Err(Error::Config(ConfigError::CacheTooSmall {
                cache_pages,
                min: MIN_CACHE_PAGES,
            }));
        }
        let dirty_limit = match config.dirty_limit_pages {
            0 => cache_pages / 2,
            n => n.min(cache_pages.saturating_sub(2)).max(1),
        };
        let shared = Arc::new(Shared {
            dev,
            geometry,
            config,
            dirty_limit: u64::from(dirty_limit),
            cache: PageCache::new(cache_pages),
            space: Mutex::new(Allocator::new(BlockNo(data.0), BlockNo(data.1))),
            tree: RwLock::new(Tree::default()),
            inodes: RwLock::new(BTreeMap::new()),
            inode_count: AtomicU64::new(0),
            reclaims: AtomicU64::new(0),
            warm: Mutex::new(super::shared::Warm::new(
                (config.idle_inodes as usize).max(1),
            )),
            next_ino: AtomicU64::new(ROOT_INO + 1),
            counters: Mutex::new((Vec::new(), Stats::default())),
            sessions: AtomicUsize::new(0),
            journal,
            meta_frames,
            meta_bytes: AtomicU64::new(0),
            unflushed: AtomicU64::new(0),
            volatile: super::volatile::Volatile::default(),
            background: super::pause::Gate::default(),
            waker: spin::Once::new(),
        });
        Ok(shared)
    }

    /// The first handle on `shared`, once it is loaded: only now may the
    /// driver of the background steps start (with the handles, which own
    /// it), since its first step may checkpoint and so allocate blocks,
    /// which before the load ended could be the checkpoint chain's or a
    /// file's (issue 31, finding 13).
    fn start(shared: Arc<Shared<D>>) -> Fs<D> {
        Fs {
            handles: Arc::new(Handles::new(&shared)),
            shared,
        }
    }

    /// Writes an empty filesystem on `dev` and mounts it. `uuid` tells this
    /// filesystem's log records from any an earlier one left on the device.
    pub fn format(dev: D, config: Config, uuid: u64) -> Result<Fs<D>> {
        let frames = meta_frames(&dev)?;
        crate::persist::format_device(&dev, frames, &config, uuid)?;
        Fs::mount(dev, config)
    }

    /// Mounts the filesystem on `dev`, recovering it from its checkpoint and
    /// log. Recovery writes nothing; a damaged image is an error naming the
    /// block and the damage. Inodes that were unlinked while open when the
    /// filesystem stopped are reclaimed (their removal is logged with the
    /// next commit).
    pub fn mount(dev: D, config: Config) -> Result<Fs<D>> {
        let frames = meta_frames(&dev)?;
        let mut rec =
            crate::persist::recover_for_mount(&dev, frames.clone(), config.clock, config.idle)?;
        let log = alloc::boxed::Box::new(Log::open(&rec, Shadow::default()));
        let layout = log.layout();
        let shared = Fs::build(
            dev,
            config,
            frames.start,
            (layout.data_start, layout.blocks),
            Journal::Log(log),
        )?;
        let orphans = Fs::load(&shared, &rec.shadow, &rec.chain)?;
        // The durable view moves into the log rather than being copied:
        // before anything can commit (no handle exists yet, the background
        // steps have not started) and before the orphans' removals stage
        // records against it.
        if let Journal::Log(log) = &shared.journal {
            log.adopt(core::mem::take(&mut rec.shadow));
        }
        Fs::reclaim_orphans(&shared, orphans);
        // What recovery replayed, for the hosted layer to report: kept
        // with the closed sessions' sum, which no session adds to.
        {
            let mut counters = shared.counters.lock();
            counters.1.replayed_log_writes = rec.log_writes;
            counters.1.replayed_records = rec.records;
        }
        Ok(Fs::start(shared))
    }

    /// Builds inodes, the tree (the shadow's own, which recovery replayed)
    /// and the allocator's state from `shadow`
    /// (which recovery checked: inode numbers in range, extents in the data
    /// area and disjoint, a connected tree), with `chain`'s blocks taken by
    /// the checkpoint. Returns the orphans: inodes with no link left.
    fn load(shared: &Shared<D>, shadow: &Shadow, chain: &[(u64, u64)]) -> Result<Vec<u64>> {
        let overlap = |block| Error::Corrupt {
            block,
            damage: Damage::Inconsistent { problems: 1 },
        };
        let mut orphans = Vec::new();
        {
            let mut tree = shared.tree.write();
            let mut inodes = shared.inodes.write();
            let mut space = shared.space.lock();
            for &(block, len) in chain {
                space
                    .reserve(BlockNo(block), len)
                    .map_err(|_| overlap(block))?;
            }
            // With a log, an inode is built when first asked for
            // (`Shared::inode`); mount only counts it and takes its blocks.
            // Without one there is no durable view to build from.
            let lazy = shared.journal.has_log();
            let mut next = ROOT_INO + 1;
            let mut meta_bytes = 0;
            for (&ino, m) in &shadow.inodes {
                for x in &m.extents {
                    space.reserve(x.dev, x.len).map_err(|_| overlap(x.dev.0))?;
                }
                if lazy {
                    let xattrs = shadow.xattrs_of(ino).map(|(n, v)| xattr_len(n, Some(v)));
                    meta_bytes += durable_meta_len(m, xattrs.sum());
                } else {
                    let inode = Inode::from_meta(InodeId(ino), m);
                    inode.load_xattrs(shadow.xattrs_of(ino));
                    {
                        let mut ext = inode.extents.write();
                        for x in &m.extents {
                            if !ext.insert(x.file_block, x.dev, x.len) {
                                return Err(overlap(x.dev.0));
                            }
                        }
                        shared.meta_len_changed(&inode, ext.len(), false);
                    }
                    inodes.insert(InodeId(ino), Arc::new(inode));
                }
                if ino != ROOT_INO && m.nlink == 0 {
                    orphans.push(ino);
                }
                next = next.max(ino + 1);
            }
            shared.meta_bytes.fetch_add(meta_bytes, Ordering::AcqRel);
            shared
                .inode_count
                .store(shadow.inodes.len() as u64, Ordering::Relaxed);
            *tree = shadow.tree.clone();
            shared
                .meta_bytes
                .fetch_add(tree.entry_bytes(), Ordering::AcqRel);
            shared.next_ino.store(next, Ordering::Relaxed);
        }
        Ok(orphans)
    }

    /// Reclaims `orphans` (inodes unlinked while open when the filesystem
    /// stopped): their removal is logged with the next commit.
    fn reclaim_orphans(shared: &Shared<D>, orphans: Vec<u64>) {
        for ino in orphans {
            if let Some(inode) = shared.inode(InodeId(ino)) {
                inode.unlinked.store(true, Ordering::Release);
                inode.open.fetch_add(1, Ordering::AcqRel);
                shared.close(&inode);
            }
        }
    }
}
