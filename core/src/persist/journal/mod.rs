//! The journal of a mounted filesystem: where its metadata changes go,
//! behind a few methods of [`Journal`] (open, stage, commit, checkpoint)
//! that the engine calls alike whether the filesystem has a log on the
//! device or lives in memory. Everything it writes goes through a
//! [`CommitEnv`] (the committing session), which also lends it the
//! allocator for checkpoint frames and takes back blocks that become free.
//!
//! A commit flushes the device once for every syncer queued (their data is
//! then durable), then makes their records durable with one FUA log write,
//! or, if they do not fit one log write, with a checkpoint that carries
//! them. A checkpoint writes the inodes that changed into the metadata
//! index (copy-on-write pages in free data blocks), flushes, and points a
//! FUA superblock write at the new root; only then do the pages it
//! replaced become free. See docs/design/format.md, section 7, for the argument
//! case by case.
//!
//! - `log`: the log's state and group commit (staging, tickets, log
//!   writes, durable sequences, held frees).
//! - `checkpoint`: checkpoint writing, a second `impl Log` block.
//! - `memory`: the journal of a filesystem with no log.
//! - here: [`Journal`], which hands each call to one or the other, and
//!   what both share with the session ([`CommitEnv`], [`PendingFree`],
//!   [`Written`]).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::future::Future;
use core::sync::atomic::{AtomicUsize, Ordering};

use super::metaio::MetaIo;
use super::record::Record;
use super::recover::Recovered;
use crate::error::Result;
use crate::space::Extent;
use crate::units::{BlockNo, Nanos};

mod checkpoint;
mod log;
mod memory;
#[cfg(test)]
mod stub;

pub(crate) use log::{DurableInode, LiveInode, Log};
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

    /// The log, if there is one: what only a log does is one call on it,
    /// with the answer for no log beside the call.
    fn log(&self) -> Option<&Log> {
        match self {
            Journal::Log(l) => Some(l),
            Journal::Memory(_) => None,
        }
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
        self.log().is_some_and(|l| l.data_room(n))
    }

    /// Inode `ino` as the durable view has it ([`Log::durable_inode`]);
    /// `None` without a log (every inode of an in-memory filesystem is
    /// in memory).
    pub(crate) fn durable_inode(&self, ino: u64) -> Option<DurableInode> {
        self.log()?.durable_inode(ino)
    }

    /// [`Log::durable_matches`]; without a log nothing matches (an
    /// in-memory filesystem's inodes exist only in memory).
    pub(crate) fn durable_matches(&self, live: &[LiveInode]) -> Vec<bool> {
        self.log().map_or_else(
            || alloc::vec![false; live.len()],
            |l| l.durable_matches(live),
        )
    }

    /// [`Log::durable_extents`]; nothing without a log.
    pub(crate) fn durable_extents(
        &self,
        skip: impl Fn(u64) -> bool,
    ) -> Vec<(u64, u64, Vec<Extent>)> {
        self.log()
            .map_or_else(Vec::new, |l| l.durable_extents(skip))
    }

    /// True for a journal with a log on the device.
    pub(crate) fn has_log(&self) -> bool {
        matches!(self, Journal::Log(_))
    }

    /// True if logged pages are due to be written home off the sync path
    /// (see [`Log::home_due`]; never without a log).
    pub(crate) fn home_due(&self) -> bool {
        self.log().is_some_and(Log::home_due)
    }

    /// Home records staged and not yet made durable by a commit.
    #[cfg(test)]
    pub(crate) fn staged_homes(&self) -> usize {
        self.log().map_or(0, Log::staged_homes)
    }

    /// True once the records staged up to `ticket` are durable (see
    /// [`Log::durable`]); at once without a log, which stages none.
    pub(crate) fn durable(&self, ticket: u64) -> bool {
        self.log().is_none_or(|l| l.durable(ticket))
    }

    /// Logged pages to write home now (see [`Log::home_candidates`]).
    pub(crate) fn home_candidates(&self, max: usize) -> Vec<(u64, u64)> {
        self.log().map_or_else(Vec::new, |l| l.home_candidates(max))
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
        self.log().is_some_and(|l| l.hold_free(f))
    }

    /// True if blocks freed at once are trimmed first. With a log they
    /// are not: after a crash the durable metadata may still map them and
    /// must find the old data there.
    pub(crate) fn trims_frees(&self) -> bool {
        matches!(self, Journal::Memory(_))
    }

    /// Blocks held by [`Journal::hold_free`].
    pub(crate) fn held_blocks(&self) -> u64 {
        self.log().map_or(0, Log::held_blocks)
    }

    /// Runs of blocks the checkpoints occupy.
    pub(crate) fn meta_runs(&self) -> Vec<(u64, u64)> {
        self.log().map_or_else(Vec::new, Log::meta_runs)
    }

    /// Free blocks data may not take, with `more_bytes` of metadata that
    /// may become durable besides what is: room for the next checkpoint.
    pub(crate) fn reserve(&self, more_bytes: u64) -> u64 {
        self.log().map_or(0, |l| l.reserve(more_bytes))
    }

    /// Counts a sync under way until the guard drops: taken before the
    /// sync stages anything, so that a commit knows whether another sync
    /// may stage into its batch if it waits a turn (see [`Log::commit`]).
    pub(crate) fn syncer(&self) -> Syncer<'_> {
        let count = self.log().map(|l| &l.syncers);
        if let Some(n) = count {
            n.fetch_add(1, Ordering::AcqRel);
        }
        Syncer(count)
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
        match self.log() {
            Some(l) => l.checkpoint_now(env).await,
            None => Ok(()),
        }
    }

    /// True if the log is due a checkpoint (see [`Log::checkpoint_due`];
    /// never without a log).
    pub(crate) fn checkpoint_due(&self) -> bool {
        self.log().is_some_and(Log::checkpoint_due)
    }

    /// Log blocks in use and the log's size in blocks (see [`Log::fill`];
    /// both 0 without a log).
    pub(crate) fn fill(&self) -> (u64, u64) {
        self.log().map_or((0, 0), Log::fill)
    }

    /// True if a background step has work: logged pages due to be written
    /// home, or a checkpoint due.
    pub(crate) fn background_due(&self) -> bool {
        self.home_due() || self.checkpoint_due()
    }

    /// Says whether a background worker checkpoints (see
    /// [`Log::set_background`]).
    pub(crate) fn set_background(&self, on: bool) {
        if let Some(l) = self.log() {
            l.set_background(on);
        }
    }

    /// A checkpoint off the sync path, if one is due (see
    /// [`Log::checkpoint_background`]); true if it wrote one.
    pub(crate) async fn checkpoint_background<E: CommitEnv>(&self, env: &E) -> Result<bool> {
        match self.log() {
            Some(l) => l.checkpoint_background(env).await,
            None => Ok(false),
        }
    }
}
