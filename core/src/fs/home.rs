//! Writing logged pages home off the sync path.
//!
//! A small sync leaves its pages' bytes in data records (see `commit`):
//! the pages stay dirty and *logged* until they are written to their
//! blocks and a home record retires their data. The log's share for data
//! is bounded ([`Journal::data_room`]); a sync that finds it full writes
//! its file's pages home itself, up to the whole share, before it can
//! finish. This module keeps the share below that bound:
//! [`Session::write_home_step`], once the share passes its low-water mark
//! ([`Journal::home_due`]), claims up to [`HOME_BATCH`] logged pages,
//! writes them to their blocks durably (FUA writes, after a flush if a
//! write or trim may still be unflushed, see `volatile`; on a device
//! without FUA, writes and then a flush) and only then, each page still claimed,
//! stages its home record and lets it go, [`HOMES_PER_COMMIT`] pages for
//! each commit (see `Session::retire`). The home records ride on the next
//! commits' log writes, so a sync still costs one log write.
//!
//! The other wait a sync could meet is the log's checkpoint, written when
//! the log is more than half full: [`Session::background_step`] is a
//! write-home step and then, if due, a checkpoint written while commits
//! go on beside it; commits then checkpoint themselves only if the log
//! passes three quarters.
//!
//! Any session can drive the step (a reactor's idle loop, with no OS); a
//! hosted layer drives it from a thread of its own (`background`).
//! Why the order is safe: docs/design/format.md, section 7, "Writing logged pages
//! home off the sync path".
//!
//! [`Journal::data_room`]: crate::persist::Journal::data_room
//! [`Journal::home_due`]: crate::persist::Journal::home_due

use alloc::vec::Vec;

use super::inode::Inode;
use super::sync_data::Run;
use super::Session;
use crate::cache::Claim;
use crate::dev::{BlockDevice, Command, DevError, Tag};
use crate::error::Result;
use crate::stats::Counter;
use crate::units::{FrameId, InodeId, Lba, PageIndex};

/// Logged pages one step writes home at most: a page a sync wants to log
/// again while it is claimed waits for its write, so the batch is kept
/// small beside the share.
pub(crate) const HOME_BATCH: usize = 32;

/// Home records a step stages for one commit (see `Session::retire`).
const HOMES_PER_COMMIT: usize = 4;

/// Polls a step waits for a commit to carry its last home records before
/// it stages the rest at once.
const HOMES_WAIT_POLLS: u32 = 256;

impl<D: BlockDevice> Session<D> {
    /// One step of the background write-home: if the log's share for data
    /// is past its low-water mark, writes up to [`HOME_BATCH`] logged pages
    /// to their blocks, durably, and stages their home records for the
    /// next commit. Returns the pages written home (0 when none was due).
    /// A failed write leaves its pages dirty and logged, their data live:
    /// the next step, a sync or unmount writes them again.
    pub async fn write_home_step_async(&self) -> Result<usize> {
        let pages = self.fs.journal.home_candidates(HOME_BATCH);
        let mut written = 0;
        let mut first_err = None;
        for group in pages.chunk_by(|a, b| a.0 == b.0) {
            let Some(inode) = self.fs.inode(InodeId(group[0].0)) else {
                continue;
            };
            // Every writeback holds an open reference (see `Shared::close`).
            if !inode.try_open() {
                continue;
            }
            let indices: Vec<PageIndex> = group.iter().map(|&(_, p)| PageIndex(p)).collect();
            let r = self.home_pages(&inode, &indices).await;
            self.fs.close(&inode);
            match r {
                Ok(n) => written += n,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        self.counters.add(Counter::homed_pages, written as u64);
        match first_err {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }

    /// Synchronous [`Session::write_home_step_async`].
    pub fn write_home_step(&self) -> Result<usize> {
        self.block_on(self.write_home_step_async())
    }

    /// One step of the log's background work: a write-home step
    /// ([`Session::write_home_step_async`]), then a checkpoint if the log
    /// is more than half full, written while commits go on beside it (see
    /// `Log::checkpoint_background`), so no sync pays for it. Returns the
    /// pages written home plus the checkpoints written (0: nothing was
    /// due, or what was due is busy).
    /// While [`Fs::pause_background`](super::Fs::pause_background) holds,
    /// it does nothing and returns 0. An error is counted in
    /// [`Stats::background_errors`](crate::Stats).
    pub async fn background_step_async(&self) -> Result<usize> {
        let Some(_running) = self.fs.background.enter() else {
            return Ok(0);
        };
        let homed = self.write_home_step_async().await;
        let checkpointed = self.checkpoint_step().await;
        let r = match (homed, checkpointed) {
            (Ok(h), Ok(c)) => Ok(h + usize::from(c)),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        if r.is_err() {
            self.counters.add(Counter::background_errors, 1);
        }
        r
    }

    /// Synchronous [`Session::background_step_async`].
    pub fn background_step(&self) -> Result<usize> {
        self.block_on(self.background_step_async())
    }

    /// Writes home those of `indices` that are still logged and idle;
    /// returns how many.
    ///
    /// Only logged pages are claimed: their bytes are in a data record
    /// staged before, which any later sync's commit covers, so a sync that
    /// finds one of them clean (claimed here) need not wait for this write,
    /// and this claim is not registered as a writeback of the file.
    async fn home_pages(&self, inode: &Inode, indices: &[PageIndex]) -> Result<usize> {
        let cache = &self.fs.cache;
        let mut claimed = Vec::with_capacity(indices.len());
        for &index in indices {
            // Busy or no longer logged: a writeback or a sync has it.
            if let Claim::Done(slot, _) = cache.begin_home(&inode.pages, inode.id, index) {
                inode.dirty_dec();
                claimed.push((index, slot));
            }
        }
        let (runs, orphans) = self.plan_runs(inode, &claimed);
        let mut first_err: Option<DevError> = None;
        for slot in orphans {
            self.end(inode, cache, slot, false);
            first_err.get_or_insert(DevError::InvalidRequest);
        }
        #[cfg(pollfs_mutants)]
        let planted = crate::mutants::active(crate::mutants::Mutant::HomeBeforeDurable);
        #[cfg(not(pollfs_mutants))]
        let planted = false;
        let fua = self.fs.geometry.fua && !planted;
        if fua && !runs.is_empty() {
            if let Err(e) = self.flush_before_fua().await {
                for run in &runs {
                    for f in &run.frames {
                        self.end(inode, cache, f.0, false);
                    }
                }
                return Err(e.into());
            }
        }
        let bpp = self.fs.geometry.blocks_per_page();
        let mut inflight: Vec<core::result::Result<Tag, DevError>> = Vec::with_capacity(runs.len());
        for run in &runs {
            let cmd = Command::Write {
                lba: Lba(run.block * bpp),
                frames: &run.frames,
                fua,
            };
            inflight.push(self.submit(&cmd).await);
        }
        let mut done: Vec<(&Run, core::result::Result<(), DevError>)> =
            Vec::with_capacity(runs.len());
        for (run, submitted) in runs.iter().zip(inflight) {
            let r = match submitted {
                Ok(tag) => self.wait(tag).await,
                Err(e) => Err(e),
            };
            if !fua {
                self.fs.volatile.note();
            }
            done.push((run, r));
        }
        // FUA writes are durable on completion; others after a flush.
        let flushed = if fua || planted || done.iter().all(|(_, r)| r.is_err()) {
            Ok(())
        } else {
            self.flush().await
        };
        let mut homed: Vec<FrameId> = Vec::with_capacity(claimed.len());
        for (run, r) in done {
            match r.and(flushed) {
                Ok(()) => homed.extend_from_slice(&run.frames),
                // Dirty again, still logged.
                Err(e) => {
                    first_err.get_or_insert(e);
                    for f in &run.frames {
                        self.end(inode, cache, f.0, false);
                    }
                }
            }
        }
        self.retire(inode, &homed).await;
        match first_err {
            Some(e) => Err(e.into()),
            None => Ok(homed.len()),
        }
    }

    /// With its pages claimed, before their FUA writes: flushes if a write
    /// or trim completed unflushed since the last flush. One may be of a
    /// block about to be written (freed, trimmed, and given to this file
    /// since; or the page's own writeback before it was logged again), and
    /// nothing orders it against a FUA write: after a power cut it could
    /// be what the block holds, under a home record that retired the
    /// logged copy (see `volatile`). Any such write completed before the
    /// claim, so a flush now covers it.
    async fn flush_before_fua(&self) -> core::result::Result<(), DevError> {
        #[cfg(pollfs_mutants)]
        if crate::mutants::active(crate::mutants::Mutant::HomeOverUnflushed) {
            return Ok(());
        }
        if self.fs.volatile.pending() {
            self.flush().await?;
        }
        Ok(())
    }

    /// Ends the claims of pages written home (durably), their home
    /// records staged first, while each page is still claimed, so each
    /// lands after the page's data records and before any later one.
    ///
    /// The records go [`HOMES_PER_COMMIT`] at a time, each few after a
    /// commit made the ones before durable: every home record costs the
    /// commit that carries it (it retires a page of live data from the
    /// durable view), and a step's 32 in one commit made that sync several
    /// times slower than the others. The pages not yet staged stay
    /// claimed. The rest go at once if a sync waits for one of those
    /// pages (it may be the sync whose commit this waits for), or if no
    /// commit came within [`HOMES_WAIT_POLLS`] polls.
    async fn retire(&self, inode: &Inode, homed: &[FrameId]) {
        let (mut rest, mut per_commit) = (homed, HOMES_PER_COMMIT);
        while !rest.is_empty() {
            let (now, later) = rest.split_at(rest.len().min(per_commit));
            let ticket = self.log_home(inode, now);
            for f in now {
                self.end(inode, &self.fs.cache, f.0, true);
            }
            rest = later;
            if let Some(ticket) = ticket.filter(|_| !rest.is_empty()) {
                if !self.committed(ticket, rest).await {
                    // Nobody commits, or a sync waits: the rest at once.
                    per_commit = rest.len();
                }
            }
        }
    }

    /// Waits until a commit makes `ticket` durable (true), or gives up
    /// (false) after [`HOMES_WAIT_POLLS`] polls or once a sync waits for
    /// one of the pages `claimed`.
    async fn committed(&self, ticket: u64, claimed: &[FrameId]) -> bool {
        for _ in 0..HOMES_WAIT_POLLS {
            if self.fs.journal.durable(ticket) {
                return true;
            }
            if claimed.iter().any(|f| self.fs.cache.has_waiters(f.0)) {
                return false;
            }
            crate::sync::yield_now().await;
        }
        self.fs.journal.durable(ticket)
    }
}

#[cfg(test)]
mod tests {
    use crate::dev::fault::{FaultPlan, FaultyDevice};
    use crate::dev::ram::RamDevice;
    use crate::dev::{CommandKind, DevError};
    use crate::fs::{Config, File, Fs, Session};

    type Dev = FaultyDevice<RamDevice>;

    /// A filesystem with a small log (64 blocks: a share of 16 pages for
    /// data, written home from 4) and one file of 40 pages, at home.
    fn setup(plan: &FaultPlan) -> (Fs<Dev>, Session<Dev>, File<Dev>) {
        let config = Config {
            cache_pages: 64,
            dirty_limit_pages: 60,
            ..Config::default()
        };
        let dev = RamDevice::new(8 << 20, 4096, 96).unwrap();
        let fs = Fs::format(FaultyDevice::new(dev, plan.clone()), config, 7).unwrap();
        let s = fs.session().unwrap();
        let f = fs.create("a").unwrap();
        s.write_all_at(&f, &[1; 40 * 4096], 0).unwrap();
        s.sync_data(&f).unwrap();
        assert_eq!(fs.dirty_pages(), 0);
        (fs, s, f)
    }

    /// Small syncs of one page each, pages `pages`.
    fn log(s: &Session<Dev>, f: &File<Dev>, pages: core::ops::Range<u64>) {
        for page in pages {
            s.write_all_at(f, &[2; 100], page * 4096).unwrap();
            s.sync_data(f).unwrap();
        }
    }

    #[test]
    fn a_step_writes_logged_pages_home_and_the_next_sync_retires_them() {
        let plan = FaultPlan::new();
        let (fs, s, f) = setup(&plan);
        log(&s, &f, 0..3);
        assert_eq!(s.write_home_step().unwrap(), 0, "below the low-water mark");
        log(&s, &f, 3..4);
        assert_eq!(fs.dirty_pages(), 4, "four logged pages");
        let before = fs.stats();
        assert_eq!(s.write_home_step().unwrap(), 4);
        let after = fs.stats();
        assert_eq!(fs.dirty_pages(), 0);
        assert_eq!(after.homed_pages - before.homed_pages, 4);
        assert_eq!(after.log_writes, before.log_writes, "home records wait");
        assert_eq!(s.write_home_step().unwrap(), 0, "their home records staged");
        // The next sync carries them in its one log write.
        log(&s, &f, 20..21);
        assert_eq!(fs.stats().log_writes, after.log_writes + 1);
        assert_eq!(fs.stats().home_on_sync, 0);
        fs.check_invariants().unwrap();
    }

    #[test]
    fn a_step_stages_its_home_records_a_few_for_each_commit() {
        use core::future::Future;
        use core::task::{Context, Poll, Waker};
        let plan = FaultPlan::new();
        let (fs, s, f) = setup(&plan);
        log(&s, &f, 0..8);
        let journal = &fs.shared.journal;
        let mut cx = Context::from_waker(Waker::noop());
        let step_session = fs.session().unwrap();
        let mut step = core::pin::pin!(step_session.write_home_step_async());
        assert!(
            step.as_mut().poll(&mut cx).is_pending(),
            "waits for a commit"
        );
        assert_eq!(journal.staged_homes(), 4, "the first four");
        // A sync's commit carries them; the step stages the next four.
        log(&s, &f, 20..21);
        assert_eq!(journal.staged_homes(), 0);
        assert!(matches!(step.as_mut().poll(&mut cx), Poll::Ready(Ok(8))));
        assert_eq!(journal.staged_homes(), 4);
        log(&s, &f, 21..22);
        assert_eq!(journal.staged_homes(), 0);
        assert_eq!(fs.stats().home_on_sync, 0);
        fs.check_invariants().unwrap();
    }

    #[test]
    fn a_step_stages_the_rest_at_once_when_no_commit_comes_or_a_sync_waits() {
        use core::future::Future;
        use core::task::{Context, Poll, Waker};
        let plan = FaultPlan::new();
        let (fs, s, f) = setup(&plan);
        let journal = &fs.shared.journal;
        // No sync comes: after its polls the step stages them all.
        log(&s, &f, 0..8);
        assert_eq!(s.write_home_step().unwrap(), 8);
        assert_eq!(journal.staged_homes(), 8);
        log(&s, &f, 20..21);
        // A sync waits for a page the step still holds (to log its new
        // bytes): the step stages the rest and lets them go at its next
        // poll.
        log(&s, &f, 0..8);
        let mut cx = Context::from_waker(Waker::noop());
        let step_session = fs.session().unwrap();
        let mut step = core::pin::pin!(step_session.write_home_step_async());
        assert!(step.as_mut().poll(&mut cx).is_pending());
        assert_eq!(journal.staged_homes(), 4);
        s.write_all_at(&f, &[9; 100], 6 * 4096).unwrap();
        let mut sync = core::pin::pin!(s.sync_data_async(&f));
        assert!(sync.as_mut().poll(&mut cx).is_pending(), "page 6 is held");
        assert!(step.as_mut().poll(&mut cx).is_ready());
        assert!(journal.staged_homes() >= 8, "the rest at once");
        assert!(matches!(sync.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
        assert_eq!(journal.staged_homes(), 0, "the sync's commit carried them");
        fs.check_invariants().unwrap();
    }

    #[test]
    fn a_failed_home_write_keeps_the_pages_logged_and_dirty() {
        let plan = FaultPlan::new();
        let (fs, s, f) = setup(&plan);
        log(&s, &f, 0..4);
        plan.fail(CommandKind::Write, 1, DevError::Media);
        assert!(s.write_home_step().is_err());
        assert_eq!(fs.dirty_pages(), 4, "still dirty");
        fs.check_invariants().unwrap();
        assert_eq!(s.write_home_step().unwrap(), 4, "written next time");
        assert_eq!(fs.dirty_pages(), 0);
    }

    #[test]
    fn with_background_steps_commits_leave_the_half_full_log_to_a_step() {
        let plan = FaultPlan::new();
        let (fs, s, f) = setup(&plan);
        fs.set_background_steps(true);
        let journal = &fs.shared.journal;
        let before = fs.stats().checkpoints;
        let mut syncs = 0;
        while !journal.checkpoint_due() {
            log(&s, &f, syncs % 40..syncs % 40 + 1);
            s.write_home_step().unwrap();
            syncs += 1;
            assert!(syncs < 500, "the log never filled");
        }
        assert_eq!(fs.stats().checkpoints, before, "no commit checkpointed");
        assert!(s.background_step().unwrap() >= 1);
        assert!(!journal.checkpoint_due());
        assert_eq!(fs.stats().checkpoints, before + 1, "the step did");
        // With no step to come, a commit checkpoints itself past three
        // quarters, a quarter of the log later than without steps.
        let mut more = 0;
        while fs.stats().checkpoints == before + 1 {
            log(&s, &f, more % 40..more % 40 + 1);
            s.write_home_step().unwrap();
            more += 1;
            assert!(more < 500, "no commit checkpointed");
        }
        assert!(
            more > syncs,
            "{more} syncs to three quarters, {syncs} to half"
        );
        fs.check_invariants().unwrap();
    }

    #[test]
    fn syncs_that_outrun_the_step_write_home_themselves_and_count_it() {
        let plan = FaultPlan::new();
        let (fs, s, f) = setup(&plan);
        let before = fs.stats();
        // The share holds 16 pages: the 17th sync writes them home.
        log(&s, &f, 0..20);
        let after = fs.stats();
        assert_eq!(after.home_on_sync - before.home_on_sync, 1);
        assert_eq!(after.homed_pages, before.homed_pages);
        assert_eq!(fs.dirty_pages(), 3);
    }
}
