//! The journal of a mounted filesystem: the log's state, group commit and
//! checkpoints, behind a few methods (open, stage, commit, checkpoint).
//! Everything it writes goes through a [`CommitEnv`] (the committing
//! session), which also lends it the allocator for checkpoint frames and
//! takes back blocks that become free.
//!
//! A commit flushes the device once for every syncer queued (their data is
//! then durable), then makes their records durable with one FUA log write,
//! or, if they do not fit one log write, with a checkpoint that carries
//! them. A checkpoint writes the inodes that changed into the metadata
//! index (copy-on-write pages in free data blocks), flushes, and points a
//! FUA superblock write at the new root; only then do the pages it
//! replaced become free. See docs/design.md, section 7, for the argument
//! case by case.

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;
use core::future::Future;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::format::{
    Frame, Layout, Location, Superblock, CKPT_FRAME_MAX_BLOCKS, FRAME_CKPT, MAX_SEQUENCE,
};
use super::index::{page::PAYLOAD, Index, Root};
use super::metaio::MetaIo;
use super::pages::{self, Applied, Changes, CACHE_PAGES};
use super::record::{InodeMeta, Record};
use super::recover::{first_location, Recovered};
use super::shadow::Shadow;
use crate::error::{Result, SpaceError};
use crate::lock::{Held, Level, Mode, RangeLock};
use crate::space::Extent;
use crate::sync::Mutex;
use crate::units::{BlockNo, ByteRange, Nanos, PAGE_SIZE_U64};

mod memory;
#[cfg(test)]
mod stub;

use memory::Memory;

/// A block freed in memory but still referenced by durable metadata.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingFree {
    pub(crate) ino: u64,
    pub(crate) dev: BlockNo,
    pub(crate) len: u64,
    /// The inode's metadata sequence after the free: a durable state
    /// captured at or after it no longer references the blocks.
    pub(crate) seq: u64,
}

/// A record waiting for a commit, in the order the engine made the
/// change: `seq` is the inode's metadata sequence for an inode record
/// captured by a sync (the record makes the inode durable up to it).
#[derive(Clone, Debug)]
struct Staged {
    record: Record,
    seq: Option<u64>,
}

/// What was written, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// One log write of `bytes`.
    Log { bytes: u64 },
    /// A checkpoint: its chain of `bytes`, written in `nanos` (from its
    /// view to its superblock).
    Checkpoint { bytes: u64, nanos: u64 },
}

/// What a commit needs from the session running it.
pub(crate) trait CommitEnv: MetaIo {
    /// Up to `max` contiguous free blocks for checkpoint frames, near
    /// `hint`; may use the blocks held back for metadata.
    fn alloc_meta(&self, hint: u64, max: u64) -> Option<(u64, u64)>;
    /// Returns runs of checkpoint blocks nothing points at any more.
    fn free_meta(&self, runs: &[(u64, u64)]);
    /// Trims and frees blocks that no durable record references.
    fn release(&self, frees: Vec<PendingFree>) -> impl Future<Output = ()>;
    /// Inode `ino`'s metadata is durable as of its sequence `seq`.
    fn logged(&self, ino: u64, seq: u64);
    /// A log write or a checkpoint was written.
    fn counted(&self, written: Written);
    /// The time, to measure how long a checkpoint takes.
    fn now(&self) -> Nanos;
    /// True if data was written since the last flush was issued (and
    /// forgets it: the caller flushes now). A commit whose data is all in
    /// its records needs no flush before its log write.
    fn take_unflushed(&self) -> bool;
    /// The flush [`CommitEnv::take_unflushed`] called for failed.
    fn unflushed_again(&self);
}

/// Staged records whose room the journal keeps between commits (see
/// `State::spare`): far more than a sync stages.
const SPARE_MAX: usize = 4096;

/// What a checkpoint writes, taken under the journal's lock
/// ([`Log::take_view`]).
struct View {
    /// The inodes that changed since the last view, as items.
    changes: Changes,
    /// The last sequence number the image covers.
    lsn: u64,
    /// The log's append position when it was taken: the new head.
    pos: u64,
    generation: u64,
    /// A failed log write's sequence number is covered (`lsn`).
    skip: bool,
}

/// What a checkpoint took for its writing: the blocks to give back if it
/// does not land, to free the old ones for if it does.
struct Taken {
    /// The changes applied: live pages' copies, and the old copies.
    applied: Applied,
    /// The carried chain.
    carry: Vec<(u64, u64)>,
    /// The blocks of the changed pages.
    pages: Vec<u64>,
}

impl Taken {
    /// Every block it took: live pages' copies, changed pages, the
    /// carried chain.
    fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.applied
            .copies
            .iter()
            .map(|c| c.0)
            .chain(self.pages.iter().copied())
            .chain(self.carry.iter().flat_map(|&(b, n)| b..b + n))
    }

    /// The same, as runs in block order.
    fn runs(&self) -> Vec<(u64, u64)> {
        let mut blocks: Vec<u64> = self.blocks().collect();
        blocks.sort_unstable();
        pages::runs(blocks)
    }
}

/// The checkpoint the superblock names.
#[derive(Clone, Debug)]
struct Checkpoint {
    /// The index's root.
    root: Root,
    /// Every block it occupies: the index's pages, live pages' copies,
    /// the carried records' chain.
    blocks: BTreeSet<u64>,
    /// The carried records' chain (freed by the next checkpoint).
    carry: Vec<(u64, u64)>,
}

#[derive(Debug)]
struct State {
    next_lsn: u64,
    /// Next log block to write (relative to the log's start).
    pos: u64,
    /// First live log block (replay starts here).
    head: u64,
    generation: u64,
    ckpt: Checkpoint,
    /// Checkpoint blocks whose fate a failed superblock write left unknown:
    /// kept until a later checkpoint succeeds.
    limbo: Vec<(u64, u64)>,
    /// A log write failed after it may have reached the device: the next
    /// commit checkpoints past its sequence number before logging again,
    /// so it can never be replayed.
    skip_lsn: bool,
    next_ticket: u64,
    durable_ticket: u64,
    /// Records staged and not yet durable, in staging order.
    pending: Vec<Staged>,
    /// The last batch's vector, emptied, to take `pending`'s place at the
    /// next commit: the two are reused, never freed and grown again, so a
    /// thread that stages (the log thread) does not reallocate memory
    /// another thread's allocator owns, which makes the two take turns on
    /// that allocator's lock (a futex wake, an interrupt to the other
    /// core).
    spare: Vec<Staged>,
    /// Data records among them.
    pending_data: usize,
    /// Home records among them: pages whose data the next commit retires.
    pending_home: usize,
    pending_frees: Vec<PendingFree>,
    /// Blocks a commit took from `pending_frees` to trim and free, not
    /// yet back in the allocator: still held, for a writer that finds
    /// the device full meanwhile must commit too (waiting on the commit
    /// lock for that release) rather than answer `DeviceFull`.
    releasing: u64,
    /// Per inode: the metadata sequence of its newest durable state.
    durable_seq: BTreeMap<u64, u64>,
    /// Inodes whose removal is durable.
    removed: BTreeSet<u64>,
    /// Inodes whose removal is staged and not yet durable: the durable
    /// view still has them, but they are gone (see [`Log::durable_inode`]).
    freeing: BTreeSet<u64>,
    shadow: Shadow,
    /// The index as of the last checkpoint, with the pages it has read;
    /// taken out by the checkpoint writing (under the checkpoint lock).
    index: Option<Index>,
}

impl State {
    fn releasable(&self, f: &PendingFree) -> bool {
        self.removed.contains(&f.ino) || self.durable_seq.get(&f.ino).is_some_and(|&s| s >= f.seq)
    }
}

/// An inode in memory as [`Log::durable_matches`] compares it: its
/// number, its record, its extended attributes in name order.
pub(crate) type LiveInode = (u64, InodeMeta, Vec<(String, Vec<u8>)>);

/// An inode as the durable view has it ([`Log::durable_inode`]).
#[derive(Debug)]
pub(crate) struct DurableInode {
    /// Its record.
    pub(crate) meta: InodeMeta,
    /// Its extended attributes.
    pub(crate) xattrs: Vec<(String, Vec<u8>)>,
    /// The sequence of its newest durable record since mount (0 if none):
    /// its live inode counts on from there, so a free held for an older
    /// sequence is never taken for durable.
    pub(crate) seq: u64,
}

/// The metadata log of a mounted filesystem.
#[derive(Debug)]
pub(crate) struct Log {
    layout: Layout,
    uuid: u64,
    lba_size: u32,
    hash_key: (u64, u64),
    /// Serialises commits; taken with no other lock held.
    commit_lock: RangeLock,
    /// Serialises checkpoints; taken after `commit_lock` when both are.
    /// A checkpoint written off the sync path ([`Log::checkpoint_background`])
    /// holds only this one while it writes, so commits go on beside it.
    ckpt_lock: RangeLock,
    /// A background worker checkpoints when the log passes half full, so
    /// commits checkpoint themselves only past three quarters.
    background: AtomicBool,
    /// Syncs under way (see [`Journal::syncer`]): a commit gives the
    /// others a turn to stage before it leads only when there are some.
    syncers: AtomicUsize,
    st: Mutex<State>,
    /// Bytes of the durable metadata's checkpoint image, for the space
    /// held back for the next checkpoint.
    durable_image: AtomicU64,
    /// Bytes of the records staged and not yet durable: a checkpoint may
    /// have to carry all of them after the image (see [`Log::reserve`]).
    queued: AtomicU64,
    /// Blocks of the checkpoint chain the superblock names: they come
    /// back only when the next checkpoint lands (see [`Log::reserve`]).
    chain_blocks: AtomicU64,
}

impl Log {
    /// The log of a recovered filesystem, holding `shadow` as its durable
    /// view: recovery's, which mount moves in ([`Log::adopt`]) once it has
    /// built the live inodes from it, so that mount never holds two copies
    /// of it. Its next log write goes after every intact log write found
    /// (none past a hole is replayed: repair starts a fresh checkpoint
    /// past them).
    pub(crate) fn open(rec: &Recovered, shadow: Shadow) -> Log {
        let sb = rec.superblock;
        let blocks: BTreeSet<u64> = rec
            .chain
            .iter()
            .flat_map(|&(b, n)| b..b.saturating_add(n))
            .collect();
        let carry = rec.carry.clone();
        Log {
            layout: sb.layout,
            uuid: sb.uuid,
            lba_size: sb.lba_size,
            hash_key: sb.hash_key,
            commit_lock: RangeLock::new(Level::Inode),
            ckpt_lock: RangeLock::new(Level::Inode),
            background: AtomicBool::new(false),
            syncers: AtomicUsize::new(0),
            durable_image: AtomicU64::new(shadow.image_len()),
            queued: AtomicU64::new(0),
            chain_blocks: AtomicU64::new(blocks.len() as u64),
            st: Mutex::new(State {
                next_lsn: rec.newest_lsn + 1,
                pos: rec.pos,
                head: sb.log_head,
                generation: sb.generation,
                ckpt: Checkpoint {
                    root: sb.root,
                    blocks,
                    carry,
                },
                limbo: Vec::new(),
                skip_lsn: rec.newest_lsn != rec.last_lsn,
                next_ticket: 1,
                durable_ticket: 0,
                pending: Vec::new(),
                spare: Vec::new(),
                pending_data: 0,
                pending_home: 0,
                pending_frees: Vec::new(),
                releasing: 0,
                // Empty: no record since recovery is durable yet. A free
                // is held until its inode's record with a sequence at least
                // the free's is durable, and every free comes after its
                // inode's change (sequence 1 or more after mount), so a
                // recovered inode needs no entry here.
                durable_seq: BTreeMap::new(),
                removed: BTreeSet::new(),
                freeing: BTreeSet::new(),
                shadow,
                index: Some(Index::open(sb.uuid, sb.root, CACHE_PAGES)),
            }),
        }
    }

    /// Takes `shadow` as the durable view, with its image length. Only
    /// for mount, between building the live inodes from recovery's view
    /// and starting anything that could commit.
    pub(crate) fn adopt(&self, shadow: Shadow) {
        self.durable_image
            .store(shadow.image_len(), Ordering::Relaxed);
        self.st.lock().shadow = shadow;
    }

    /// Inode `ino` as the durable view has it, to build its live inode
    /// from: `None` if the view does not have it, or its removal is
    /// staged (a file reclaimed in memory must not come back from the
    /// view before its removal is durable).
    pub(crate) fn durable_inode(&self, ino: u64) -> Option<DurableInode> {
        let st = self.st.lock();
        if st.freeing.contains(&ino) {
            return None;
        }
        let meta = st.shadow.inodes.get(&ino)?.clone();
        Some(DurableInode {
            meta,
            xattrs: st
                .shadow
                .xattrs_of(ino)
                .map(|(n, v)| (String::from(n), v.to_vec()))
                .collect(),
            seq: st.durable_seq.get(&ino).copied().unwrap_or(0),
        })
    }

    /// For each inode of `live` (number, record, extended attributes in
    /// name order): true if the durable view has exactly that, and its
    /// removal is not staged. An idle inode for which this holds may
    /// leave memory: [`Log::durable_inode`] builds it again as it is.
    pub(crate) fn durable_matches(&self, live: &[LiveInode]) -> Vec<bool> {
        let st = self.st.lock();
        live.iter()
            .map(|(ino, meta, xattrs)| {
                !st.freeing.contains(ino)
                    && st.shadow.inodes.get(ino) == Some(meta)
                    && st
                        .shadow
                        .xattrs_of(*ino)
                        .eq(xattrs.iter().map(|(n, v)| (n.as_str(), v.as_slice())))
            })
            .collect()
    }

    /// The extents of every inode in the durable view that `skip` does not
    /// name, with each inode's size (for the invariant checker: the
    /// blocks of inodes not built in memory).
    pub(crate) fn durable_extents(
        &self,
        skip: impl Fn(u64) -> bool,
    ) -> Vec<(u64, u64, Vec<Extent>)> {
        let st = self.st.lock();
        st.shadow
            .inodes
            .iter()
            .filter(|(&ino, _)| !skip(ino) && !st.freeing.contains(&ino))
            .map(|(&ino, m)| (ino, m.size, m.extents.clone()))
            .collect()
    }

    /// The layout.
    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// Stages `records` together (no other record comes between them, and
    /// one commit makes all of them durable or none); returns the ticket.
    pub(crate) fn stage_all(
        &self,
        records: impl IntoIterator<Item = (Record, Option<u64>)>,
    ) -> u64 {
        let mut st = self.st.lock();
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        let mut bytes = 0;
        for (record, seq) in records {
            match record {
                Record::Data { .. } => st.pending_data += 1,
                Record::Home { .. } => st.pending_home += 1,
                Record::Free { ino } => {
                    st.freeing.insert(ino);
                }
                _ => {}
            }
            bytes += record.encoded_len();
            st.pending.push(Staged { record, seq });
        }
        self.queued.fetch_add(bytes, Ordering::AcqRel);
        ticket
    }

    /// The log's share for data, in pages: live data is carried by every
    /// checkpoint and kept in memory, so it is bounded (a quarter of the
    /// log, at most 256 pages).
    fn data_cap(&self) -> usize {
        (self.layout.log_blocks / 4).min(256) as usize
    }

    /// True if `n` more pages of data fit the log's share for them. Past
    /// that, syncs write pages to their blocks, which retires their data
    /// records: the last resort, when the background write-home
    /// ([`Log::home_due`]) did not keep up. Staged home records are not
    /// counted off: until a commit makes them durable their pages' data
    /// is live, and a checkpoint folding that commit in carries both.
    pub(crate) fn data_room(&self, n: usize) -> bool {
        let st = self.st.lock();
        st.shadow.data_pages() + st.pending_data + n <= self.data_cap()
    }

    /// True if the log holds enough data to start writing pages home off
    /// the sync path: a quarter of its share (the low-water mark), not
    /// counting pages whose home record is staged (the next commit retires
    /// them). Syncs fall back to writing home themselves only at the full
    /// share, three quarters of it later.
    pub(crate) fn home_due(&self) -> bool {
        let st = self.st.lock();
        let held = (st.shadow.data_pages() + st.pending_data).saturating_sub(st.pending_home);
        held > 0 && held >= self.data_cap() / 4
    }

    /// Up to `max` pages `(inode, page)` whose bytes the log holds (live,
    /// then staged), for writing home off the sync path; none unless
    /// [`Log::home_due`]. Some may be home already, their home record
    /// staged: the caller claims only pages still logged.
    pub(crate) fn home_candidates(&self, max: usize) -> Vec<(u64, u64)> {
        if !self.home_due() {
            return Vec::new();
        }
        let st = self.st.lock();
        let staged = st.pending.iter().filter_map(|s| match s.record {
            Record::Data { ino, page, .. } => Some((ino, page)),
            _ => None,
        });
        // The durable view's pages come in order: its first `max` and the
        // staged ones hold the first `max` of all, so the lock is held for
        // a batch's worth of pages, not the whole share's.
        let mut out: Vec<(u64, u64)> = st
            .shadow
            .data()
            .map(|(&k, _)| k)
            .take(max)
            .chain(staged)
            .collect();
        out.sort_unstable();
        out.dedup();
        out.truncate(max);
        out
    }

    /// True once a commit made every record staged up to `ticket` durable.
    pub(crate) fn durable(&self, ticket: u64) -> bool {
        self.st.lock().durable_ticket >= ticket
    }

    /// A ticket for a sync with no record to stage: the commit that covers
    /// it flushes everything written before this call.
    pub(crate) fn ticket(&self) -> u64 {
        let mut st = self.st.lock();
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        ticket
    }

    /// Inode records staged and not yet durable (for tests).
    #[cfg(test)]
    pub(crate) fn queued_inode_records(&self) -> usize {
        let st = self.st.lock();
        st.pending
            .iter()
            .filter(|s| matches!(s.record, Record::Inode { .. }))
            .count()
    }

    /// Holds `f` until no durable record references its blocks; false if
    /// none does now (the caller frees them at once).
    pub(crate) fn hold_free(&self, f: PendingFree) -> bool {
        let mut st = self.st.lock();
        if st.releasable(&f) {
            return false;
        }
        st.pending_frees.push(f);
        true
    }

    /// Blocks held by [`Log::hold_free`], until a commit has returned
    /// them to the allocator.
    pub(crate) fn held_blocks(&self) -> u64 {
        let st = self.st.lock();
        st.pending_frees.iter().map(|f| f.len).sum::<u64>() + st.releasing
    }

    /// Runs of blocks the journal's checkpoints occupy.
    pub(crate) fn meta_runs(&self) -> Vec<(u64, u64)> {
        let st = self.st.lock();
        let mut runs = pages::runs(st.ckpt.blocks.iter().copied());
        runs.extend_from_slice(&st.limbo);
        runs
    }

    /// Bytes of the durable metadata's checkpoint image.
    pub(crate) fn durable_image_len(&self) -> u64 {
        self.durable_image.load(Ordering::Relaxed)
    }

    /// Free blocks data may not take: room for a checkpoint of the durable
    /// image, every record queued (a commit whose records do not fit a log
    /// write folds them all in after the image), and `more_bytes` (what
    /// may be staged yet: each live inode's record).
    ///
    /// Room for one checkpoint is not enough: the chain it writes takes
    /// the room, and only the chain it replaces comes back. If the image
    /// grew since that one was written, what comes back is less than the
    /// checkpoint after it will need, and an unmount of a full device
    /// after a remount failed for want of it. So the reserve is the next
    /// chain plus what the chain after it needs beyond the one now on
    /// disk: after a checkpoint of `n` blocks replaces one of `c`, the
    /// free blocks are at least `2n - c - n + c = n`, the room for the
    /// next.
    ///
    /// The next checkpoint writes at most every page of the index again
    /// (the chain, if every leaf changed) or a tree of the whole view:
    /// the image's bytes as items (keys and offsets cost about what a
    /// record's header does) in pages at least half full, as splits leave
    /// them (a tree made fresh by a repair fills its pages), the branches
    /// above them, and the queued records carried in frames of one block
    /// each if free space is that fragmented.
    fn reserve(&self, more_bytes: u64) -> u64 {
        let image = self.durable_image_len() + more_bytes;
        let leaves = (image * 2).div_ceil(PAYLOAD as u64);
        let chain = self.chain_blocks.load(Ordering::Acquire);
        let carried = self
            .queued
            .load(Ordering::Acquire)
            .div_ceil(Frame::capacity(1) as u64);
        let next = leaves.max(chain) + leaves / 8 + carried + 4;
        next + next.saturating_sub(chain)
    }

    /// Joins a group commit; returns when a flush after `ticket` was taken,
    /// and every record staged up to it, are durable. The first syncer to
    /// take the commit lock leads: one flush and one log write (or
    /// checkpoint) for everything staged so far.
    pub(crate) async fn commit<E: CommitEnv>(&self, env: &E, ticket: u64) -> Result<()> {
        // Let other syncs under way stage before a leader takes the batch:
        // then one flush and one log write serve them all. A lone sync
        // does not yield: under `block_on` a yield is a system call on
        // every sync, and nobody would stage meanwhile.
        if self.syncers.load(Ordering::Acquire) > 1 {
            crate::sync::yield_now().await;
        }
        let held = Held::new();
        let _leader = self
            .commit_lock
            .lock(ByteRange::from(0), Mode::Exclusive, &held)
            .await;
        if self.durable(ticket) {
            return Ok(());
        }
        let (batch, last) = {
            let mut st = self.st.lock();
            st.pending_data = 0;
            st.pending_home = 0;
            let spare = core::mem::take(&mut st.spare);
            (
                core::mem::replace(&mut st.pending, spare),
                st.next_ticket - 1,
            )
        };
        match self.write_records(env, &batch).await {
            Ok(()) => {
                let bytes: u64 = batch.iter().map(|s| s.record.encoded_len()).sum();
                self.queued.fetch_sub(bytes, Ordering::AcqRel);
                let mut batch = batch;
                batch.clear();
                {
                    let mut st = self.st.lock();
                    st.durable_ticket = last;
                    // A rare huge batch's room is not kept for ever.
                    if batch.capacity() <= SPARE_MAX {
                        st.spare = batch;
                    }
                }
                self.release_frees(env).await;
                // A failed checkpoint leaves the old one valid and the log
                // intact; the next commit tries again.
                let _ = self.checkpoint_if_needed(env).await;
                Ok(())
            }
            Err(e) => {
                // Nothing of this batch is durable: put it back, in order,
                // ahead of what was staged meanwhile, for the next leader.
                let mut st = self.st.lock();
                st.pending_data += batch
                    .iter()
                    .filter(|s| matches!(s.record, Record::Data { .. }))
                    .count();
                st.pending_home += batch
                    .iter()
                    .filter(|s| matches!(s.record, Record::Home { .. }))
                    .count();
                let mut pending = batch;
                pending.append(&mut st.pending);
                st.pending = pending;
                Err(e)
            }
        }
    }

    /// Flushes if data was written since the last flush, then makes
    /// `records` durable: one log write if they fit one, else a
    /// checkpoint with them folded in.
    async fn write_records<E: CommitEnv>(&self, env: &E, records: &[Staged]) -> Result<()> {
        // One flush makes every queued syncer's data durable: each queued
        // after its writeback completed. A batch whose data is all in its
        // records (data records, and pages written and flushed before)
        // needs none: its FUA log write is its only command.
        if env.take_unflushed() {
            if let Err(e) = env.flush().await {
                env.unflushed_again();
                return Err(e);
            }
        }
        if records.is_empty() {
            return Ok(());
        }
        let mut payload = super::format::Enc::default();
        for s in records {
            s.record.encode(&mut payload);
        }
        if Frame::blocks_for(payload.0.len()) <= self.layout.log_frame_max() {
            self.log_write(env, &payload.0).await?;
        } else {
            self.checkpoint(env, &payload.0).await?;
        }
        self.apply_durable(env, records);
        Ok(())
    }

    /// Where a log write of `n` blocks goes, if the log has room: at `pos`,
    /// or at the log's start if it does not fit before the end. The blocks
    /// from `pos` (wrapping) through the end of the write must not reach
    /// the live head, unless the log is empty.
    fn place(&self, head: u64, pos: u64, n: u64) -> Option<u64> {
        let blocks = self.layout.log_blocks;
        let at = if pos + n <= blocks { pos } else { 0 };
        let used = (pos + blocks - head) % blocks;
        let skip = if at == pos { 0 } else { blocks - pos };
        (head == pos && n < blocks || used + skip + n < blocks).then_some(at)
    }

    /// One FUA log write at the append position, checkpointing first if
    /// the log has no room (or a failed write's sequence must be skipped).
    async fn log_write<E: CommitEnv>(&self, env: &E, payload: &[u8]) -> Result<()> {
        let n = Frame::blocks_for(payload.len());
        let at = {
            let st = self.st.lock();
            if st.skip_lsn {
                None
            } else {
                self.place(st.head, st.pos, n)
            }
        };
        let at = match at {
            Some(at) => at,
            None => {
                self.checkpoint(env, &[]).await?;
                let st = self.st.lock();
                self.place(st.head, st.pos, n)
                    .ok_or(SpaceError::MetadataFull)?
            }
        };
        let lsn = self.st.lock().next_lsn;
        if lsn > MAX_SEQUENCE {
            return Err(SpaceError::SequenceExhausted.into());
        }
        let bytes = Frame::log(self.uuid, lsn).encode(payload);
        if let Err(e) = env.write(self.layout.log_start + at, &bytes, true).await {
            self.st.lock().skip_lsn = true;
            return Err(e);
        }
        env.counted(Written::Log {
            bytes: bytes.len() as u64,
        });
        let mut st = self.st.lock();
        st.pos = (at + n) % self.layout.log_blocks;
        st.next_lsn = lsn + 1;
        Ok(())
    }

    /// Records that `records` are durable: the durable view, the inodes'
    /// logged sequences, durable removals.
    fn apply_durable<E: CommitEnv>(&self, env: &E, records: &[Staged]) {
        let mut st = self.st.lock();
        for s in records {
            // The durable view was built by these same rules; a record that
            // does not apply is dropped rather than poisoning the view.
            let _ = st.shadow.apply(&s.record);
            match (&s.record, s.seq) {
                (Record::Inode { ino, .. }, Some(seq)) => {
                    let e = st.durable_seq.entry(*ino).or_insert(0);
                    *e = (*e).max(seq);
                    env.logged(*ino, seq);
                }
                (Record::Free { ino }, _) => {
                    st.freeing.remove(ino);
                    st.removed.insert(*ino);
                }
                _ => {}
            }
        }
        self.durable_image
            .store(st.shadow.image_len(), Ordering::Relaxed);
    }

    /// Returns to the allocator every held block that no durable record
    /// references any more.
    async fn release_frees<E: CommitEnv>(&self, env: &E) {
        let (ready, blocks) = {
            let mut st = self.st.lock();
            let (ready, keep): (Vec<PendingFree>, Vec<PendingFree>) =
                core::mem::take(&mut st.pending_frees)
                    .into_iter()
                    .partition(|f| st.releasable(f));
            st.pending_frees = keep;
            let blocks: u64 = ready.iter().map(|f| f.len).sum();
            st.releasing += blocks;
            (ready, blocks)
        };
        if !ready.is_empty() {
            env.release(ready).await;
            self.st.lock().releasing -= blocks;
        }
    }

    /// Log blocks in use: from the live head to the append position.
    fn log_used(&self) -> u64 {
        let st = self.st.lock();
        (st.pos + self.layout.log_blocks - st.head) % self.layout.log_blocks
    }

    /// Log blocks in use, and the log's size in blocks.
    pub(crate) fn fill(&self) -> (u64, u64) {
        (self.log_used(), self.layout.log_blocks)
    }

    /// True if more than half the log is in use: time for a checkpoint,
    /// which frees the log up to the append position.
    pub(crate) fn checkpoint_due(&self) -> bool {
        self.log_used() * 2 > self.layout.log_blocks
    }

    /// Says whether a background worker checkpoints when
    /// [`Log::checkpoint_due`] (see [`Log::checkpoint_background`]).
    pub(crate) fn set_background(&self, on: bool) {
        self.background.store(on, Ordering::Relaxed);
    }

    /// After a commit: checkpoints when more than half the log is in use,
    /// or, with a background worker that does that, only past three
    /// quarters (the worker fell behind).
    async fn checkpoint_if_needed<E: CommitEnv>(&self, env: &E) -> Result<()> {
        let needed = if self.background.load(Ordering::Relaxed) {
            self.log_used() * 4 > self.layout.log_blocks * 3
        } else {
            self.checkpoint_due()
        };
        if needed {
            self.checkpoint(env, &[]).await?;
        }
        Ok(())
    }

    /// Writes a checkpoint now (for unmount, so the next mount replays
    /// nothing).
    pub(crate) async fn checkpoint_now<E: CommitEnv>(&self, env: &E) -> Result<()> {
        let held = Held::new();
        let _leader = self
            .commit_lock
            .lock(ByteRange::from(0), Mode::Exclusive, &held)
            .await;
        self.checkpoint(env, &[]).await
    }

    /// A checkpoint off the sync path, if [`Log::checkpoint_due`]: the
    /// durable view is taken under the commit lock, between two commits,
    /// and written with only the checkpoint lock held, while commits go
    /// on appending to the log after the position it was taken at. The
    /// superblock then moves the log's head to that position: every
    /// record before it is in the image, every one after it is replayed.
    /// Until the superblock lands, the old checkpoint and the whole log
    /// stay valid, and appends never pass the old head. `env` writes
    /// through frames of its own: commits use theirs meanwhile. True if
    /// it wrote one.
    pub(crate) async fn checkpoint_background<E: CommitEnv>(&self, env: &E) -> Result<bool> {
        if !self.checkpoint_due() {
            return Ok(false);
        }
        let held = Held::new();
        let leader = self
            .commit_lock
            .lock(ByteRange::from(0), Mode::Exclusive, &held)
            .await;
        let ckpt_held = Held::new();
        let _ckpt = self
            .ckpt_lock
            .lock(ByteRange::from(0), Mode::Exclusive, &ckpt_held)
            .await;
        // A commit may have checkpointed while this waited.
        if !self.checkpoint_due() {
            return Ok(false);
        }
        let view = self.take_view()?;
        drop(leader);
        // Commits queued behind the view go first: on a reactor that
        // drives this step and the syncs on one thread, too.
        crate::sync::yield_now().await;
        self.write_checkpoint(env, view, &[]).await?;
        Ok(true)
    }

    /// Writes a checkpoint with `extra` (encoded records being made
    /// durable by this checkpoint) folded in. The caller holds the commit
    /// lock, so the view taken is everything durable.
    async fn checkpoint<E: CommitEnv>(&self, env: &E, extra: &[u8]) -> Result<()> {
        // Waits for a background checkpoint, which holds no commit lock
        // while it writes.
        let held = Held::new();
        let _ckpt = self
            .ckpt_lock
            .lock(ByteRange::from(0), Mode::Exclusive, &held)
            .await;
        let view = self.take_view()?;
        self.write_checkpoint(env, view, extra).await
    }

    /// The durable view and where the log stands, for a checkpoint: with
    /// no commit running, the records up to `lsn` are all applied to the
    /// view and the log after them starts at `pos`. The data's pages are
    /// shared, not copied.
    fn take_view(&self) -> Result<View> {
        let mut st = self.st.lock();
        Ok(View {
            changes: Changes::take(&mut st.shadow, self.hash_key)?,
            // After a failed log write, the checkpoint covers its sequence
            // number too, so that write can never be replayed.
            lsn: if st.skip_lsn {
                st.next_lsn
            } else {
                st.next_lsn - 1
            },
            pos: st.pos,
            generation: st.generation + 1,
            skip: st.skip_lsn,
        })
    }

    /// Writes `view`'s changes into the index (and `extra`, records this
    /// checkpoint makes durable besides, as a carried chain); flushes;
    /// then points the superblock at the new root with the log's head
    /// moved to the view's position. Until that superblock write, the old
    /// root, every page under it and the log stay valid: new pages go to
    /// free blocks, and replaced ones are freed only after it. The caller
    /// holds the checkpoint lock.
    async fn write_checkpoint<E: CommitEnv>(
        &self,
        env: &E,
        view: View,
        extra: &[u8],
    ) -> Result<()> {
        let View {
            changes,
            lsn,
            pos,
            generation,
            skip,
        } = view;
        // A superblock the decoder would refuse is never written.
        if lsn > MAX_SEQUENCE || generation > MAX_SEQUENCE {
            self.st.lock().shadow.retouch(changes.inos());
            return Err(SpaceError::SequenceExhausted.into());
        }
        let started = env.now();
        let (mut index, old_root) = {
            let mut st = self.st.lock();
            let root = st.ckpt.root;
            let index = st
                .index
                .take()
                .unwrap_or_else(|| Index::open(self.uuid, root, CACHE_PAGES));
            (index, root)
        };
        let written = self
            .write_tree(env, &mut index, &changes, extra, lsn, generation)
            .await;
        let (taken, commit, bytes) = match written {
            Ok(done) => done,
            Err((e, taken)) => {
                // Nothing the old root reaches was touched: forget the
                // changed pages, give back the blocks, mark the inodes
                // for the next checkpoint.
                env.free_meta(&taken.runs());
                let mut st = self.st.lock();
                st.index = Some(Index::open(self.uuid, old_root, CACHE_PAGES));
                st.shadow.retouch(changes.inos());
                return Err(e);
            }
        };
        let sb = Superblock {
            uuid: self.uuid,
            generation,
            lba_size: self.lba_size,
            layout: self.layout,
            root: commit.root,
            carry: first_location(&taken.carry),
            carry_total: taken.carry.iter().map(|r| r.1).sum(),
            ckpt_lsn: lsn,
            log_head: pos,
            hash_key: self.hash_key,
        };
        if let Err(e) = env.write(generation % 2, &sb.encode(), true).await {
            // The superblock may or may not have landed: keep both trees.
            // The next checkpoint starts again from the old root, with the
            // same generation, into the same superblock slot.
            let mut st = self.st.lock();
            st.limbo.extend_from_slice(&taken.runs());
            st.index = Some(Index::open(self.uuid, old_root, CACHE_PAGES));
            st.shadow.retouch(changes.inos());
            return Err(e);
        }
        env.counted(Written::Checkpoint {
            bytes,
            nanos: env.now().0.saturating_sub(started.0),
        });
        index.trim();
        let old = {
            let mut st = self.st.lock();
            st.generation = generation;
            st.head = pos;
            if skip {
                st.next_lsn = lsn + 1;
                st.skip_lsn = false;
            }
            let mut gone: Vec<u64> = commit.freed;
            gone.extend_from_slice(&taken.applied.old_copies);
            let old_carry = core::mem::take(&mut st.ckpt.carry);
            gone.extend(old_carry.iter().flat_map(|&(b, n)| b..b + n));
            for b in &gone {
                st.ckpt.blocks.remove(b);
            }
            st.ckpt.blocks.extend(taken.blocks());
            st.ckpt.root = commit.root;
            st.ckpt.carry = taken.carry;
            st.index = Some(index);
            self.chain_blocks
                .store(st.ckpt.blocks.len() as u64, Ordering::Release);
            gone.sort_unstable();
            let mut old = pages::runs(gone);
            old.append(&mut st.limbo);
            old
        };
        env.free_meta(&old);
        Ok(())
    }

    /// The writing of a checkpoint up to its superblock: the changes
    /// applied to `index`, the carried chain, the live pages' copies and
    /// the changed pages written, then a flush. On an error, what it took
    /// (for the caller to give back).
    async fn write_tree<E: CommitEnv>(
        &self,
        env: &E,
        index: &mut Index,
        changes: &Changes,
        extra: &[u8],
        lsn: u64,
        generation: u64,
    ) -> core::result::Result<(Taken, super::index::Commit, u64), (crate::error::Error, Taken)>
    {
        let mut applied = Applied::default();
        let mut hint = self.layout.data_start;
        let mut alloc_one = || {
            let got = env.alloc_meta(hint, 1).map(|(b, _)| b);
            if let Some(b) = got {
                hint = b + 1;
            }
            got
        };
        let taken = |applied, carry, pages| Taken {
            applied,
            carry,
            pages,
        };
        if let Err(e) = pages::apply(env, index, changes, &mut alloc_one, &mut applied).await {
            return Err((e, taken(applied, Vec::new(), Vec::new())));
        }
        let carry = if extra.is_empty() {
            Vec::new()
        } else {
            match self.alloc_chain(env, extra.len()) {
                Ok(runs) => runs,
                Err(e) => return Err((e, taken(applied, Vec::new(), Vec::new()))),
            }
        };
        let mut pages = Vec::with_capacity(index.dirty_pages());
        while pages.len() < index.dirty_pages() {
            let want = (index.dirty_pages() - pages.len()) as u64;
            match env.alloc_meta(hint, want.min(CKPT_FRAME_MAX_BLOCKS)) {
                Some((b, n)) => {
                    pages.extend(b..b + n);
                    hint = b + n;
                }
                None => {
                    let e = SpaceError::MetadataFull.into();
                    return Err((e, taken(applied, carry, pages)));
                }
            }
        }
        let commit = match index.commit(generation, &pages) {
            Ok(c) => c,
            Err(_) => {
                let e = crate::error::Error::Corrupt {
                    block: 0,
                    damage: crate::error::Damage::Index(crate::error::IndexDamage::Page(
                        super::index::PageDamage::Header,
                    )),
                };
                return Err((e, taken(applied, carry, pages)));
            }
        };
        match self
            .write_pages(env, &carry, extra, lsn, &applied, &commit)
            .await
        {
            Ok(bytes) => Ok((taken(applied, carry, pages), commit, bytes)),
            Err(e) => Err((e, taken(applied, carry, pages))),
        }
    }

    /// Writes the carried chain, the live pages' copies and the changed
    /// pages (children before parents), then flushes; the bytes written.
    async fn write_pages<E: CommitEnv>(
        &self,
        env: &E,
        carry: &[(u64, u64)],
        extra: &[u8],
        lsn: u64,
        applied: &Applied,
        commit: &super::index::Commit,
    ) -> Result<u64> {
        let mut bytes = 0u64;
        if !extra.is_empty() {
            self.write_chain(env, carry, extra, lsn).await?;
            bytes += carry.iter().map(|r| r.1).sum::<u64>() * PAGE_SIZE_U64;
        }
        for (block, page) in applied.copies.iter() {
            env.write(*block, page, false).await?;
            bytes += PAGE_SIZE_U64;
        }
        for (block, page) in &commit.writes {
            env.write(*block, page, false).await?;
            bytes += PAGE_SIZE_U64;
        }
        env.flush().await?;
        Ok(bytes)
    }

    /// Allocates runs of data blocks for a checkpoint of `len` bytes.
    fn alloc_chain<E: CommitEnv>(&self, env: &E, len: usize) -> Result<Vec<(u64, u64)>> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut room = 0usize;
        let mut hint = self.layout.data_start;
        while runs.is_empty() || room < len {
            let want = Frame::blocks_for(len - room).min(CKPT_FRAME_MAX_BLOCKS);
            let Some((block, n)) = env.alloc_meta(hint, want) else {
                env.free_meta(&runs);
                return Err(SpaceError::MetadataFull.into());
            };
            runs.push((block, n));
            room += Frame::capacity(n);
            hint = block + n;
        }
        Ok(runs)
    }

    /// Writes `stream` as checkpoint frames into `runs` (the caller flushes).
    async fn write_chain<E: CommitEnv>(
        &self,
        env: &E,
        runs: &[(u64, u64)],
        stream: &[u8],
        lsn: u64,
    ) -> Result<()> {
        let mut at = 0;
        for (i, &(block, n)) in runs.iter().enumerate() {
            let take = Frame::capacity(n).min(stream.len() - at);
            let next = runs
                .get(i + 1)
                .map_or(Location::default(), |&(b, m)| Location {
                    block: b,
                    blocks: m as u32,
                });
            let frame = Frame {
                kind: FRAME_CKPT,
                uuid: self.uuid,
                lsn,
                blocks: 0,
                payload_len: 0,
                next,
                index: i as u32,
            };
            env.write(block, &frame.encode(&stream[at..at + take]), false)
                .await?;
            at += take;
        }
        Ok(())
    }
}

/// Where a filesystem's metadata changes go: its log on the device
/// ([`Log`], for `Fs::format`/`Fs::mount`), or nowhere ([`Memory`], for
/// `Fs::new`, whose state lives and dies in memory, as redb's in-memory
/// backend does). The engine stages, commits and frees through this type
/// and never asks which it has.
#[derive(Debug)]
pub(crate) enum Journal {
    /// The log and checkpoints on the device (boxed: one per
    /// filesystem, ten times the size of the other).
    Log(Box<Log>),
    /// No log (see [`Memory`]).
    Memory(Memory),
}

/// A sync under way, counted by [`Journal::syncer`] until dropped.
#[derive(Debug)]
pub(crate) struct Syncer<'a>(Option<&'a AtomicUsize>);

impl Drop for Syncer<'_> {
    fn drop(&mut self) {
        if let Some(n) = self.0 {
            n.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Journal {
    /// The journal of a recovered filesystem: its log.
    pub(crate) fn open(rec: &Recovered) -> Journal {
        Journal::Log(Box::new(Log::open(rec, rec.shadow.clone())))
    }

    /// The journal of a filesystem with no log.
    pub(crate) fn in_memory() -> Journal {
        Journal::Memory(Memory::default())
    }

    /// Queues `record` for the next commit, after everything staged
    /// before; returns its ticket (see [`Journal::commit`]). `seq` is
    /// given for an inode record a sync captured: its inode's metadata
    /// sequence.
    pub(crate) fn stage(&self, record: Record, seq: Option<u64>) -> u64 {
        self.stage_all([(record, seq)])
    }

    /// Stages `records` together; returns the ticket.
    pub(crate) fn stage_all(
        &self,
        records: impl IntoIterator<Item = (Record, Option<u64>)>,
    ) -> u64 {
        match self {
            Journal::Log(l) => l.stage_all(records),
            Journal::Memory(m) => m.stage_all(records),
        }
    }

    /// True if `n` more pages of data fit in the log (never without one).
    pub(crate) fn data_room(&self, n: usize) -> bool {
        match self {
            Journal::Log(l) => l.data_room(n),
            Journal::Memory(_) => false,
        }
    }

    /// Inode `ino` as the durable view has it ([`Log::durable_inode`]);
    /// `None` without a log (every inode of an in-memory filesystem is
    /// in memory).
    pub(crate) fn durable_inode(&self, ino: u64) -> Option<DurableInode> {
        match self {
            Journal::Log(l) => l.durable_inode(ino),
            Journal::Memory(_) => None,
        }
    }

    /// [`Log::durable_matches`]; without a log nothing matches (an
    /// in-memory filesystem's inodes exist only in memory).
    pub(crate) fn durable_matches(&self, live: &[LiveInode]) -> Vec<bool> {
        match self {
            Journal::Log(l) => l.durable_matches(live),
            Journal::Memory(_) => alloc::vec![false; live.len()],
        }
    }

    /// [`Log::durable_extents`]; nothing without a log.
    pub(crate) fn durable_extents(
        &self,
        skip: impl Fn(u64) -> bool,
    ) -> Vec<(u64, u64, Vec<Extent>)> {
        match self {
            Journal::Log(l) => l.durable_extents(skip),
            Journal::Memory(_) => Vec::new(),
        }
    }

    /// True for a journal with a log on the device.
    pub(crate) fn has_log(&self) -> bool {
        matches!(self, Journal::Log(_))
    }

    /// True if logged pages are due to be written home off the sync path
    /// (see [`Log::home_due`]; never without a log).
    pub(crate) fn home_due(&self) -> bool {
        match self {
            Journal::Log(l) => l.home_due(),
            Journal::Memory(_) => false,
        }
    }

    /// Home records staged and not yet made durable by a commit.
    #[cfg(test)]
    pub(crate) fn staged_homes(&self) -> usize {
        match self {
            Journal::Log(l) => l.st.lock().pending_home,
            Journal::Memory(_) => 0,
        }
    }

    /// True once the records staged up to `ticket` are durable (see
    /// [`Log::durable`]); at once without a log, which stages none.
    pub(crate) fn durable(&self, ticket: u64) -> bool {
        match self {
            Journal::Log(l) => l.durable(ticket),
            Journal::Memory(_) => true,
        }
    }

    /// Logged pages to write home now (see [`Log::home_candidates`]).
    pub(crate) fn home_candidates(&self, max: usize) -> Vec<(u64, u64)> {
        match self {
            Journal::Log(l) => l.home_candidates(max),
            Journal::Memory(_) => Vec::new(),
        }
    }

    /// A ticket for a sync with no record to stage.
    pub(crate) fn ticket(&self) -> u64 {
        match self {
            Journal::Log(l) => l.ticket(),
            Journal::Memory(m) => m.ticket(),
        }
    }

    /// Holds `f` until no durable record references its blocks; false if
    /// none does (the caller frees them at once, trimmed if
    /// [`Journal::trims_frees`]).
    pub(crate) fn hold_free(&self, f: PendingFree) -> bool {
        match self {
            Journal::Log(l) => l.hold_free(f),
            Journal::Memory(_) => false,
        }
    }

    /// True if blocks freed at once are trimmed first. With a log they
    /// are not: after a crash the durable metadata may still map them and
    /// must find the old data there.
    pub(crate) fn trims_frees(&self) -> bool {
        matches!(self, Journal::Memory(_))
    }

    /// Blocks held by [`Journal::hold_free`].
    pub(crate) fn held_blocks(&self) -> u64 {
        match self {
            Journal::Log(l) => l.held_blocks(),
            Journal::Memory(_) => 0,
        }
    }

    /// Runs of blocks the checkpoints occupy.
    pub(crate) fn meta_runs(&self) -> Vec<(u64, u64)> {
        match self {
            Journal::Log(l) => l.meta_runs(),
            Journal::Memory(_) => Vec::new(),
        }
    }

    /// Free blocks data may not take, with `more_bytes` of metadata that
    /// may become durable besides what is: room for the next checkpoint.
    pub(crate) fn reserve(&self, more_bytes: u64) -> u64 {
        match self {
            Journal::Log(l) => l.reserve(more_bytes),
            Journal::Memory(_) => 0,
        }
    }

    /// Counts a sync under way until the guard drops: taken before the
    /// sync stages anything, so that a commit knows whether another sync
    /// may stage into its batch if it waits a turn (see [`Log::commit`]).
    pub(crate) fn syncer(&self) -> Syncer<'_> {
        match self {
            Journal::Log(l) => {
                l.syncers.fetch_add(1, Ordering::AcqRel);
                Syncer(Some(&l.syncers))
            }
            Journal::Memory(_) => Syncer(None),
        }
    }

    /// Returns when every record staged up to `ticket`, and every write
    /// before it, are durable (see [`Log::commit`]).
    pub(crate) async fn commit<E: CommitEnv>(&self, env: &E, ticket: u64) -> Result<()> {
        match self {
            Journal::Log(l) => l.commit(env, ticket).await,
            Journal::Memory(m) => m.commit(env).await,
        }
    }

    /// Writes a checkpoint now (for unmount and repair); nothing without
    /// a log.
    pub(crate) async fn checkpoint_now<E: CommitEnv>(&self, env: &E) -> Result<()> {
        match self {
            Journal::Log(l) => l.checkpoint_now(env).await,
            Journal::Memory(_) => Ok(()),
        }
    }

    /// True if the log is due a checkpoint (see [`Log::checkpoint_due`];
    /// never without a log).
    pub(crate) fn checkpoint_due(&self) -> bool {
        match self {
            Journal::Log(l) => l.checkpoint_due(),
            Journal::Memory(_) => false,
        }
    }

    /// Log blocks in use and the log's size in blocks (see [`Log::fill`];
    /// both 0 without a log).
    pub(crate) fn fill(&self) -> (u64, u64) {
        match self {
            Journal::Log(l) => l.fill(),
            Journal::Memory(_) => (0, 0),
        }
    }

    /// True if a background step has work: logged pages due to be written
    /// home, or a checkpoint due.
    pub(crate) fn background_due(&self) -> bool {
        self.home_due() || self.checkpoint_due()
    }

    /// Says whether a background worker checkpoints (see
    /// [`Log::set_background`]).
    pub(crate) fn set_background(&self, on: bool) {
        if let Journal::Log(l) = self {
            l.set_background(on);
        }
    }

    /// A checkpoint off the sync path, if one is due (see
    /// [`Log::checkpoint_background`]); true if it wrote one.
    pub(crate) async fn checkpoint_background<E: CommitEnv>(&self, env: &E) -> Result<bool> {
        match self {
            Journal::Log(l) => l.checkpoint_background(env).await,
            Journal::Memory(_) => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::stub::{run, Stub};
    use super::*;
    use crate::persist::format::LOG_FRAME_MAX_BLOCKS;
    use crate::persist::record::InodeMeta;

    fn journal(blocks: u64) -> Log {
        let layout = Layout::for_blocks(blocks).unwrap();
        let rec = Recovered {
            shadow: Shadow::default(),
            superblock: Superblock {
                uuid: 1,
                generation: 1,
                lba_size: 4096,
                layout,
                root: Root {
                    block: layout.data_start,
                    generation: 1,
                    level: 0,
                },
                carry: Location::default(),
                carry_total: 0,
                ckpt_lsn: 0,
                log_head: 0,
                hash_key: (1, 2),
            },
            chain: alloc::vec![(layout.data_start, 1)],
            carry: Vec::new(),
            log_writes: 0,
            records: 0,
            last_lsn: 0,
            newest_lsn: 0,
            pos: 0,
            damage: None,
            problems: Vec::new(),
            notes: Vec::new(),
        };
        Log::open(&rec, rec.shadow.clone())
    }

    #[test]
    fn a_log_write_never_reaches_the_live_head() {
        let j = journal(1 << 20);
        let blocks = j.layout.log_blocks;
        assert_eq!(j.place(0, 0, 10), Some(0));
        // Wraps to the start when it does not fit before the end...
        assert_eq!(j.place(blocks - 5, blocks - 5, 10), Some(0));
        // ...unless the head is in the way.
        assert_eq!(j.place(5, blocks - 3, 10), None);
        assert_eq!(j.place(20, 5, 10), Some(5));
        assert_eq!(j.place(20, 5, 15), None);
        assert!(j.layout.log_frame_max() <= LOG_FRAME_MAX_BLOCKS);
    }

    #[test]
    fn a_free_is_held_until_a_durable_record_drops_the_blocks() {
        let j = journal(1 << 16);
        let f = PendingFree {
            ino: 7,
            dev: BlockNo(100),
            len: 2,
            seq: 3,
        };
        assert!(j.hold_free(f));
        assert_eq!(j.held_blocks(), 2);
        j.st.lock().durable_seq.insert(7, 3);
        assert!(!j.hold_free(f));
    }

    fn home(page: u64) -> Record {
        Record::Home { ino: 5, page }
    }

    fn pending(j: &Log) -> Vec<Record> {
        j.st.lock()
            .pending
            .iter()
            .map(|s| s.record.clone())
            .collect()
    }

    #[test]
    fn a_failed_batch_is_put_back_in_order_ahead_of_what_came_meanwhile() {
        let j = journal(1 << 16);
        let env = Stub::default();
        let ticket = j.stage_all([(home(1), None), (home(2), None)]);
        env.fail_writes.set(true);
        *env.stage_on_write.borrow_mut() = Some((&j, home(3)));
        assert!(run(j.commit(&env, ticket)).is_err());
        assert_eq!(pending(&j), [home(1), home(2), home(3)]);
        assert_eq!(j.st.lock().durable_ticket, 0, "nothing became durable");
        // The next leader writes all three (after a checkpoint past the
        // failed write's sequence, which may have reached the device).
        env.fail_writes.set(false);
        let last = j.ticket();
        run(j.commit(&env, last)).unwrap();
        assert!(pending(&j).is_empty());
        assert_eq!(j.st.lock().durable_ticket, last);
        assert!(!env.writes.borrow().is_empty());
        // A later commit for a ticket already durable writes nothing.
        let writes = env.writes.borrow().len();
        run(j.commit(&env, ticket)).unwrap();
        assert_eq!(env.writes.borrow().len(), writes);
    }

    #[test]
    fn a_commit_flushes_only_after_data_was_written_and_retries_a_failed_flush() {
        let j = journal(1 << 16);
        let env = Stub::default();
        let t = j.stage_all([(Record::Free { ino: 9 }, None)]);
        run(j.commit(&env, t)).unwrap();
        assert_eq!(
            env.flushes.get(),
            0,
            "no data written: the FUA write is all"
        );
        assert_eq!(env.writes.borrow().len(), 1);
        assert!(env.writes.borrow()[0].2, "the log write is FUA");
        assert!(j.st.lock().removed.contains(&9));
        // Data written: the flush comes first; if it fails, nothing is
        // written and the next commit flushes again.
        env.unflushed.set(1);
        env.fail_flush.set(true);
        let t = j.stage_all([(Record::Free { ino: 10 }, None)]);
        assert!(run(j.commit(&env, t)).is_err());
        assert_eq!(env.writes.borrow().len(), 1);
        assert_eq!(env.unflushed.get(), 1, "the flush is owed again");
        env.fail_flush.set(false);
        run(j.commit(&env, t)).unwrap();
        assert_eq!((env.flushes.get(), env.writes.borrow().len()), (1, 2));
    }

    #[test]
    fn an_inode_record_makes_its_sequence_durable_and_releases_its_frees() {
        let j = journal(1 << 16);
        let env = Stub::default();
        let f = PendingFree {
            ino: 4,
            dev: BlockNo(100),
            len: 3,
            seq: 2,
        };
        assert!(j.hold_free(f));
        let meta = InodeMeta::new(super::super::record::Kind::File, 0o644, 0, 0, 1);
        let t = j.stage_all([(Record::Inode { ino: 4, meta }, Some(2))]);
        run(j.commit(&env, t)).unwrap();
        assert_eq!(*env.logged.borrow(), [(4, 2)]);
        assert_eq!(j.held_blocks(), 0, "the record no longer maps the blocks");
    }
}
