//! Whole-image operations with no filesystem mounted: format, check and
//! repair. They share recovery with mount (so mount and fsck agree on
//! every image) and write through the journal's own checkpoint code.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cell::RefCell;

use super::format::{Layout, Location, Superblock};
use super::index::image::inode_items;
use super::index::Index;
use super::journal::{CommitEnv, Journal, PendingFree, Written};
use super::metaio::{BlockIo, MetaIo};
use super::problems::{Owner, Problem};
use super::record::Record;
use super::recover::{recover, Mode, Recovered};
use super::shadow::Shadow;
use super::META_FRAMES;
use crate::dev::{BlockDevice, FrameArena};
use crate::error::{ConfigError, Error, RepairError, Result, SpaceError};
use crate::space::Allocator;
use crate::sync::block_on;
use crate::units::ROOT_INO;
use crate::units::{BlockNo, Nanos, PAGE_SIZE, PAGE_SIZE_U64};

/// Metadata I/O through the last [`META_FRAMES`] frames of `dev`'s arena.
fn block_io<D: BlockDevice>(dev: &D, clock: fn() -> Nanos, idle: fn()) -> Result<BlockIo<'_, D>> {
    let frames = dev.frames().frame_count();
    let first = frames.saturating_sub(META_FRAMES);
    if first == frames {
        return Err(Error::Config(ConfigError::FewFrames {
            frames,
            metadata: META_FRAMES,
            needed: 0,
        }));
    }
    Ok(BlockIo::new(dev, first..frames, clock, idle)?)
}

/// The key of the hash that places names in the index, for the
/// filesystem `uuid` (random, chosen by the caller of format): mixed from
/// it, so nobody who cannot read the superblock can choose names that
/// fill one bucket.
pub(crate) fn hash_key(uuid: u64) -> (u64, u64) {
    let mut r = crate::rng::SplitMix64::new(uuid ^ 0x6e61_6d65_6b65_7973);
    (r.next_u64(), r.next_u64())
}

/// Writes an empty filesystem: an index of just a root directory (owned
/// by `owner`, stamped `now`) in the first data blocks, and both
/// superblock copies naming it.
pub(crate) fn format<M: MetaIo>(
    io: &M,
    layout: Layout,
    uuid: u64,
    lba_size: u32,
    owner: (u32, u32),
    now: u64,
) -> Result<()> {
    let key = hash_key(uuid);
    let view = Shadow::empty(owner.0, owner.1, now);
    let bad = |_| Error::Corrupt {
        block: layout.data_start,
        damage: crate::error::Damage::Index(crate::error::IndexDamage::Page(
            super::index::PageDamage::Header,
        )),
    };
    let mut index = Index::new(uuid, 16);
    let root_items = inode_items(&view, ROOT_INO, key).map_err(|_| bad(()))?;
    for (k, v) in &root_items.items {
        // A new tree is all in memory: no page to miss.
        index.insert(*k, v).map_err(|_| bad(()))?;
    }
    let blocks: Vec<u64> = (0..index.dirty_pages() as u64)
        .map(|i| layout.data_start + i)
        .collect();
    let commit = index.commit(1, &blocks).map_err(|_| bad(()))?;
    block_on(
        async {
            for (block, page) in &commit.writes {
                io.write(*block, page, false).await?;
            }
            // No frame of an earlier filesystem at the log's start.
            io.write(layout.log_start, &[0u8; PAGE_SIZE], false).await?;
            io.flush().await?;
            for generation in [1u64, 2] {
                let sb = Superblock {
                    uuid,
                    generation,
                    lba_size,
                    layout,
                    root: commit.root,
                    carry: Location::default(),
                    carry_total: 0,
                    ckpt_lsn: 0,
                    log_head: 0,
                    hash_key: key,
                };
                io.write(generation % 2, &sb.encode(), true).await?;
            }
            Ok(())
        },
        || {},
    )
}

/// What `check` found.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    /// Every problem found; empty means clean.
    pub problems: Vec<String>,
    /// Inodes in the durable metadata (files, directories and links,
    /// the root included).
    pub files: usize,
    /// Data blocks in use by files.
    pub blocks_used: u64,
    /// Data blocks in use by the checkpoint.
    pub checkpoint_blocks: u64,
    /// Log writes replayed.
    pub log_writes: u64,
    /// Pages whose synced bytes are in data records, not yet in their
    /// blocks (the next mount writes them there).
    pub data_pages: usize,
    /// Notes that are not problems (a damaged superblock copy while the
    /// other is good).
    pub notes: Vec<String>,
}

impl CheckReport {
    fn from_recovered(r: &Recovered) -> CheckReport {
        let mut problems: Vec<String> = r
            .damage
            .iter()
            .map(|(b, d)| alloc::format!("block {b}: {d}"))
            .collect();
        problems.extend(r.problems.iter().map(|p| describe(&r.shadow, p)));
        CheckReport {
            problems,
            files: r.shadow.inodes.len(),
            blocks_used: r
                .shadow
                .inodes
                .values()
                .flat_map(|f| f.extents.iter())
                .fold(0u64, |n, x| n.saturating_add(x.len)),
            checkpoint_blocks: r.chain.iter().map(|c| c.1).sum(),
            log_writes: r.log_writes,
            data_pages: r.shadow.data_pages(),
            notes: r.notes.clone(),
        }
    }
}

/// A problem, with the inode's path where it has one.
fn describe(shadow: &Shadow, p: &Problem) -> String {
    let ino = match p {
        Problem::OutsideData { ino, .. }
        | Problem::PastEof { ino, .. }
        | Problem::LinkCount { ino, .. } => Some(*ino),
        _ => None,
    };
    match ino.and_then(|i| shadow.paths().remove(&i)) {
        Some(path) => alloc::format!("{p} ('{path}')"),
        None => p.to_string(),
    }
}

/// Checks a filesystem image without changing it: superblocks, the
/// checkpoint chain, the log (including a damaged write with intact later
/// ones), and every metadata invariant. A damaged image is a report with
/// problems; only a device error is an `Err`.
pub fn check<D: BlockDevice>(dev: &D, clock: fn() -> Nanos, idle: fn()) -> Result<CheckReport> {
    let io = block_io(dev, clock, idle)?;
    let found = block_on(
        recover(&io, io.capacity_blocks(), io.lba_size(), Mode::Check),
        idle,
    );
    match found {
        Ok(r) => Ok(CheckReport::from_recovered(&r)),
        Err(Error::Corrupt { block, damage }) => Ok(CheckReport {
            problems: alloc::vec![alloc::format!("block {block}: {damage}")],
            ..CheckReport::default()
        }),
        Err(e) => Err(e),
    }
}

/// What `repair` did.
#[derive(Clone, Debug, Default)]
pub struct RepairReport {
    /// Each repair made; empty means the image needed none.
    pub repaired: Vec<String>,
    /// The image as checked after the repair.
    pub after: CheckReport,
}

/// Repairs what can be repaired: a log with a hole (what precedes the
/// damage is kept, what follows is discarded and named), extents outside
/// the data area or past EOF (dropped), blocks owned twice (the later
/// owner loses them), a damaged superblock copy (both are rewritten). A
/// damaged checkpoint or no usable superblock cannot be repaired: that is
/// an error. Writes a new checkpoint, so the old one stays valid until the
/// new superblocks are durable.
pub fn repair<D: BlockDevice>(dev: &D, clock: fn() -> Nanos, idle: fn()) -> Result<RepairReport> {
    let io = block_io(dev, clock, idle)?;
    let mut rec = block_on(
        recover(&io, io.capacity_blocks(), io.lba_size(), Mode::Check),
        idle,
    )?;
    let mut repaired: Vec<String> = Vec::new();
    if let Some((block, d)) = rec.damage.take() {
        repaired.push(alloc::format!(
            "block {block}: {d}: kept the {} log writes before it, discarded log writes up to {}",
            rec.log_writes,
            rec.newest_lsn
        ));
    }
    repaired.extend(
        rec.notes
            .drain(..)
            .map(|n| alloc::format!("{n}: rewritten")),
    );
    let layout = rec.superblock.layout;
    // Each round fixes what it finds; structural fixes first, link counts
    // once nothing else is wrong. Bound the rounds anyway.
    let rounds = rec.shadow.inodes.len() + rec.shadow.tree.entry_count() + rec.chain.len() + 2;
    for _ in 0..rounds {
        let problems = rec.shadow.problems(&layout, &rec.chain);
        if problems.is_empty() {
            break;
        }
        let structural = problems
            .iter()
            .any(|p| !matches!(p, Problem::LinkCount { .. }));
        for p in &problems {
            if structural && matches!(p, Problem::LinkCount { .. }) {
                continue;
            }
            let done = fix(&mut rec.shadow, p);
            repaired.push(alloc::format!("{}: {done}", describe(&rec.shadow, p)));
        }
    }
    rec.problems.clear();
    // Fixes change the view in ways no record describes: the next
    // checkpoint writes every inode's items again.
    rec.shadow.touch_all();
    let env = OfflineEnv::new(&io, &rec)?;
    let journal = Journal::open(&rec);
    // Twice: each checkpoint writes one superblock copy.
    for _ in 0..2 {
        block_on(journal.checkpoint_now(&env), idle)?;
    }
    drop(env);
    Ok(RepairReport {
        repaired,
        after: check(dev, clock, idle)?,
    })
}

/// Fixes one problem; says how.
fn fix(shadow: &mut Shadow, p: &Problem) -> &'static str {
    match p {
        Problem::OutsideData { ino, block, len } => {
            shadow.retain_extents(*ino, |x| !(x.dev.0 == *block && x.len == *len));
            "dropped the extent"
        }
        Problem::PastEof { ino, size, .. } => {
            let eof = size.div_ceil(PAGE_SIZE_U64);
            shadow.retain_extents(*ino, |x| x.file_block + x.len <= eof);
            "dropped the extents past EOF"
        }
        Problem::OwnedTwice {
            block,
            first,
            second,
        } => {
            let loser = match (first, second) {
                (_, Owner::Inode(i)) | (Owner::Inode(i), Owner::Checkpoint) => *i,
                (Owner::Checkpoint, Owner::Checkpoint) => return "left as it is",
            };
            shadow.retain_extents(loser, |x| !(x.dev.0 <= *block && *block < x.dev.0 + x.len));
            "the later owner lost the block"
        }
        Problem::XattrsTooLarge { ino, .. } => {
            shadow.trim_xattrs(*ino);
            "dropped the extended attributes past the total, in name order"
        }
        Problem::NoRoot => {
            shadow.make_root();
            "made a new, empty root"
        }
        Problem::DanglingEntry { parent, name } => {
            shadow.drop_entry(*parent, name);
            "dropped the entry"
        }
        Problem::BadDirLinks { ino } if *ino == ROOT_INO => {
            // No entry may name the root (such entries dangle and are
            // dropped); its `..` is itself.
            shadow.set_parent(ROOT_INO, ROOT_INO);
            "made the root's '..' the root"
        }
        Problem::BadDirLinks { ino } => {
            // Keep the entry that agrees with the directory's `..` (or the
            // first); drop the others.
            let parent = shadow.inodes.get(ino).map_or(0, |m| m.parent);
            let naming: Vec<(u64, String)> = shadow
                .tree
                .entries()
                .filter(|&(_, _, i)| i == *ino)
                .map(|(p, n, _)| (p, String::from(n)))
                .collect();
            let keep = naming.iter().position(|(p, _)| *p == parent).unwrap_or(0);
            for (i, (p, n)) in naming.iter().enumerate() {
                if i != keep {
                    shadow.drop_entry(*p, n);
                }
            }
            if let Some((p, _)) = naming.get(keep) {
                shadow.set_parent(*ino, *p);
            }
            "kept one entry and made '..' agree"
        }
        Problem::Unreachable { ino } => {
            let naming: Vec<(u64, String)> = shadow
                .tree
                .entries()
                .filter(|&(_, _, i)| i == *ino)
                .map(|(p, n, _)| (p, String::from(n)))
                .collect();
            for (p, n) in &naming {
                shadow.drop_entry(*p, n);
            }
            shadow.attach_to_root(*ino);
            "linked into the root as #<inode>"
        }
        Problem::LinkCount { ino, counted, .. } => {
            shadow.set_nlink(*ino, *counted);
            "set the link count to the links counted"
        }
    }
}

/// A commit environment with no filesystem mounted: block I/O, and an
/// allocator of the data area less every file's extents and the current
/// checkpoint.
struct OfflineEnv<'a, 'd, D: BlockDevice> {
    io: &'a BlockIo<'d, D>,
    space: RefCell<Allocator>,
}

impl<'a, 'd, D: BlockDevice> OfflineEnv<'a, 'd, D> {
    fn new(io: &'a BlockIo<'d, D>, rec: &Recovered) -> Result<Self> {
        let layout = rec.superblock.layout;
        let mut space = Allocator::new(BlockNo(layout.data_start), BlockNo(layout.blocks));
        let used = rec
            .shadow
            .inodes
            .values()
            .flat_map(|f| f.extents.iter().map(|x| (x.dev.0, x.len)))
            .chain(rec.chain.iter().copied());
        for (block, len) in used {
            space
                .reserve(BlockNo(block), len)
                .map_err(|_| Error::Repair(RepairError::StillOverlaps { block }))?;
        }
        Ok(OfflineEnv {
            io,
            space: RefCell::new(space),
        })
    }
}

impl<D: BlockDevice> MetaIo for OfflineEnv<'_, '_, D> {
    async fn read(&self, block: u64, n: usize) -> Result<Vec<u8>> {
        self.io.read(block, n).await
    }
    async fn write(&self, block: u64, bytes: &[u8], fua: bool) -> Result<()> {
        self.io.write(block, bytes, fua).await
    }
    async fn flush(&self) -> Result<()> {
        self.io.flush().await
    }
}

impl<D: BlockDevice> CommitEnv for OfflineEnv<'_, '_, D> {
    fn alloc_meta(&self, hint: u64, max: u64) -> Option<(u64, u64)> {
        self.space
            .borrow_mut()
            .alloc(BlockNo(hint), max)
            .map(|(b, n)| (b.0, n))
    }
    fn free_meta(&self, runs: &[(u64, u64)]) {
        let mut space = self.space.borrow_mut();
        for &(b, n) in runs {
            let _ = space.free(BlockNo(b), n);
        }
    }
    async fn release(&self, _frees: Vec<PendingFree>) {}
    fn logged(&self, _ino: u64, _seq: u64) {}
    fn counted(&self, _written: Written) {}
    fn now(&self) -> Nanos {
        // Nobody reads an offline repair's counters.
        Nanos(0)
    }
    fn take_unflushed(&self) -> bool {
        true
    }
    fn unflushed_again(&self) {}
}

/// Recovers the durable metadata of `dev` for mounting: any damage or
/// broken invariant is an error. Live data (small syncs' pages, durable
/// in log records) is written to its blocks and flushed, then one log
/// write of a Home record per page retires it, so no later replay can
/// write those bytes over newer ones; the result is what the device holds
/// then. (A log write, not a checkpoint: it is cheaper, and an image whose
/// superblock generation is exhausted still mounts; one whose log
/// sequence numbers are exhausted gets a checkpoint instead.)
pub(crate) fn recover_for_mount<D: BlockDevice>(
    dev: &D,
    frames: core::ops::Range<u32>,
    clock: fn() -> Nanos,
    idle: fn(),
) -> Result<Recovered> {
    let io = BlockIo::new(dev, frames, clock, idle)?;
    let recover_now = || {
        block_on(
            recover(&io, io.capacity_blocks(), io.lba_size(), Mode::Mount),
            idle,
        )
    };
    let rec = recover_now()?;
    if rec.shadow.data_pages() == 0 {
        return Ok(rec);
    }
    // What the mount replayed is what this first look found; the second,
    // after the live data is retired, may find a log the retiring
    // checkpointed away.
    let replayed = (rec.log_writes, rec.records);
    block_on(
        async {
            for (_, (block, bytes)) in rec.shadow.data() {
                io.write(*block, bytes, false).await?;
            }
            io.flush().await
        },
        idle,
    )?;
    let homes: Vec<(Record, Option<u64>)> = rec
        .shadow
        .data()
        .map(|(&(ino, page), _)| (Record::Home { ino, page }, None))
        .collect();
    let env = OfflineEnv::new(&io, &rec)?;
    let journal = Journal::open(&rec);
    let ticket = journal.stage_all(homes);
    match block_on(journal.commit(&env, ticket), idle) {
        // The log's sequence numbers are used up (the superblock's
        // generation may not be): a checkpoint without the data.
        Err(Error::Space(SpaceError::SequenceExhausted)) => {
            drop(env);
            let mut rec = rec;
            rec.shadow.clear_data();
            let env = OfflineEnv::new(&io, &rec)?;
            block_on(Journal::open(&rec).checkpoint_now(&env), idle)?;
        }
        done => done?,
    }
    let mut again = recover_now()?;
    (again.log_writes, again.records) = replayed;
    Ok(again)
}

/// Formats `dev` (see [`format`]) through `frames`.
pub(crate) fn format_device<D: BlockDevice>(
    dev: &D,
    frames: core::ops::Range<u32>,
    config: &crate::Config,
    uuid: u64,
) -> Result<()> {
    let io = BlockIo::new(dev, frames, config.clock, config.idle)?;
    let layout = Layout::for_blocks(io.capacity_blocks()).ok_or(Error::Config(
        ConfigError::DeviceTooSmall {
            blocks: io.capacity_blocks(),
        },
    ))?;
    let now = (config.wall_clock)();
    format(&io, layout, uuid, io.lba_size(), config.root_owner, now)
}
