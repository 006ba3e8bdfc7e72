//! The log of a mounted filesystem and its group commit: records staged
//! in the order the engine made the changes, tickets that say when they
//! are durable, the commit that makes a batch durable with one flush and
//! one FUA log write (or a checkpoint, `checkpoint.rs`, when they do not
//! fit one), the durable view and each inode's durable sequence that
//! follow from it, and frees held until no durable record references
//! their blocks.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::checkpoint::Checkpoint;
use super::{CommitEnv, PendingFree, Written};
use crate::error::{Result, SpaceError};
use crate::lock::{Held, Level, Mode, RangeLock};
use crate::persist::format::{Enc, Frame, Layout, MAX_SEQUENCE};
use crate::persist::index::Index;
use crate::persist::pages::CACHE_PAGES;
use crate::persist::record::{InodeMeta, Record};
use crate::persist::recover::Recovered;
use crate::persist::shadow::Shadow;
use crate::space::Extent;
use crate::sync::Mutex;
use crate::units::ByteRange;

/// A record waiting for a commit, in the order the engine made the
/// change: `seq` is the inode's metadata sequence for an inode record
/// captured by a sync (the record makes the inode durable up to it).
#[derive(Clone, Debug)]
struct Staged {
    record: Record,
    seq: Option<u64>,
}

/// Staged records whose room the journal keeps between commits (see
/// `State::spare`): far more than a sync stages.
const SPARE_MAX: usize = 4096;

/// The log's state, behind [`Log`]'s lock; the fields checkpoint writing
/// uses too (`checkpoint.rs`) are `pub(super)`.
#[derive(Debug)]
pub(super) struct State {
    pub(super) next_lsn: u64,
    /// Next log block to write (relative to the log's start).
    pub(super) pos: u64,
    /// First live log block (replay starts here).
    pub(super) head: u64,
    pub(super) generation: u64,
    pub(super) ckpt: Checkpoint,
    /// Checkpoint blocks whose fate a failed superblock write left unknown:
    /// kept until a later checkpoint succeeds.
    pub(super) limbo: Vec<(u64, u64)>,
    /// A log write failed after it may have reached the device: the next
    /// commit checkpoints past its sequence number before logging again,
    /// so it can never be replayed.
    pub(super) skip_lsn: bool,
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
    pub(super) shadow: Shadow,
    /// The index as of the last checkpoint, with the pages it has read;
    /// taken out by the checkpoint writing (under the checkpoint lock).
    pub(super) index: Option<Index>,
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

/// The metadata log of a mounted filesystem (its checkpoint writing is
/// in `checkpoint.rs`).
#[derive(Debug)]
pub(crate) struct Log {
    pub(super) layout: Layout,
    pub(super) uuid: u64,
    pub(super) lba_size: u32,
    pub(super) hash_key: (u64, u64),
    /// Serialises commits; taken with no other lock held.
    pub(super) commit_lock: RangeLock,
    /// Serialises checkpoints; taken after `commit_lock` when both are.
    /// A checkpoint written off the sync path ([`Log::checkpoint_background`])
    /// holds only this one while it writes, so commits go on beside it.
    pub(super) ckpt_lock: RangeLock,
    /// A background worker checkpoints when the log passes half full, so
    /// commits checkpoint themselves only past three quarters.
    pub(super) background: AtomicBool,
    /// Syncs under way (see [`Journal::syncer`](super::Journal::syncer)):
    /// a commit gives the others a turn to stage before it leads only when
    /// there are some.
    pub(super) syncers: AtomicUsize,
    pub(super) st: Mutex<State>,
    /// Bytes of the durable metadata's checkpoint image, for the space
    /// held back for the next checkpoint.
    durable_image: AtomicU64,
    /// Bytes of the records staged and not yet durable: a checkpoint may
    /// have to carry all of them after the image (see [`Log::reserve`]).
    pub(super) queued: AtomicU64,
    /// Blocks of the checkpoint chain the superblock names: they come
    /// back only when the next checkpoint lands (see [`Log::reserve`]).
    pub(super) chain_blocks: AtomicU64,
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
        let ckpt = Checkpoint::recovered(rec);
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
            chain_blocks: AtomicU64::new(ckpt.block_count()),
            st: Mutex::new(State {
                next_lsn: rec.newest_lsn + 1,
                pos: rec.pos,
                head: sb.log_head,
                generation: sb.generation,
                ckpt,
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

    /// Home records staged and not yet made durable by a commit (for
    /// tests).
    #[cfg(test)]
    pub(super) fn staged_homes(&self) -> usize {
        self.st.lock().pending_home
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

    /// Bytes of the durable metadata's checkpoint image.
    pub(crate) fn durable_image_len(&self) -> u64 {
        self.durable_image.load(Ordering::Relaxed)
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
        let mut payload = Enc::default();
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
    pub(super) fn log_used(&self) -> u64 {
        let st = self.st.lock();
        (st.pos + self.layout.log_blocks - st.head) % self.layout.log_blocks
    }

    /// Log blocks in use, and the log's size in blocks.
    pub(crate) fn fill(&self) -> (u64, u64) {
        (self.log_used(), self.layout.log_blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::super::stub::{run, Stub};
    use super::*;
    use crate::persist::format::{Location, Superblock, LOG_FRAME_MAX_BLOCKS};
    use crate::persist::index::Root;
    use crate::persist::record::Kind;
    use crate::units::BlockNo;

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
        let meta = InodeMeta::new(Kind::File, 0o644, 0, 0, 1);
        let t = j.stage_all([(Record::Inode { ino: 4, meta }, Some(2))]);
        run(j.commit(&env, t)).unwrap();
        assert_eq!(*env.logged.borrow(), [(4, 2)]);
        assert_eq!(j.held_blocks(), 0, "the record no longer maps the blocks");
    }
}
