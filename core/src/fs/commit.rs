//! Sync: the session's side of a commit (with a log, or with the
//! in-memory journal of `Fs::new`, whose commit is one flush).
//!
//! A sync writes back its file's dirty pages (keeping them pinned until the
//! commit says whether they are durable), then, only if the file's size or
//! extents changed since they were last logged, captures one record from
//! the in-memory inode while writers are held off, so every block the
//! record maps has had its data written. The journal's group commit makes
//! it durable (see `persist::journal`): an overwrite inside EOF costs its
//! data writes and one flush; an append, one flush and one log write.
//! A small sync puts its pages' bytes in the log instead; they are written
//! home later, off the sync path (see `home`).

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::Ordering;

use super::inode::Inode;
use super::Session;
use crate::cache::Claim;
use crate::dev::{BlockDevice, Command, FrameArena};
use crate::error::Result;
use crate::lock::{Held, Mode};
use crate::persist::record::Record;
use crate::persist::{chunks, CommitEnv, Journal, MetaIo, PendingFree, Written};
use crate::stats::Counter;
use crate::units::{BlockNo, FrameId, InodeId, Lba, Nanos, PageIndex, PAGE_SIZE};

/// Pages a sync wrote and keeps pinned until its commit ends.
type Kept = (Arc<Inode>, Vec<u32>);

impl<D: BlockDevice> Session<D> {
    /// `sync_data`/`sync_all`.
    pub(crate) async fn sync_logged(&self, inode: &Inode, j: &Journal) -> Result<()> {
        let _syncer = j.syncer();
        let (kept, ticket) = self.capture(inode, j).await?;
        let committed = j.commit(&self.meta_env(), ticket).await;
        self.release_kept(inode, &kept, committed.is_ok());
        committed
    }

    /// Writes back `inode`'s dirty pages (kept pinned, returned) and, if
    /// its metadata changed since it was last logged, stages its record
    /// with writers held off; or, for a small sync, puts the pages' bytes
    /// in data records instead. Returns the ticket to commit for.
    async fn capture(&self, inode: &Inode, j: &Journal) -> Result<(Vec<u32>, u64)> {
        if let Some(ticket) = self.capture_logged(inode, j).await? {
            return Ok((Vec::new(), ticket));
        }
        if !inode.meta_dirty() {
            let kept = self.writeback(inode, true).await?;
            return Ok((kept, j.ticket()));
        }
        let held = Held::new();
        let _inode_lock = self.inode_lock(inode, Mode::Exclusive, &held).await;
        let _unblock = self.drain_writers(inode).await;
        let kept = self.writeback(inode, true).await?;
        let Some(seq) = inode.seq_to_stage() else {
            return Ok((kept, j.ticket()));
        };
        // Under the namespace lock, so the link count and parent it carries
        // agree with the namespace records staged before it.
        let ticket = {
            let _tree = self.fs.tree.read();
            let record = Record::Inode {
                ino: inode.id.0,
                meta: inode.meta(),
            };
            let ticket = j.stage(record, Some(seq));
            inode.staged(seq);
            ticket
        };
        Ok((kept, ticket))
    }

    /// After this sync staged data records, or a log write: wakes the
    /// log's background thread if it sleeps and has work, counting the
    /// wake-up.
    fn wake_background(&self) {
        if self.fs.wake_background() {
            self.counters.add(Counter::home_wakes, 1);
        }
    }

    /// The pages of `inode` a sync must make durable and no data record
    /// holds: dirty and not logged, among those in `range` (see
    /// [`Inode::log_range`]).
    fn unlogged_pages(&self, inode: &Inode, (lo, hi): (u64, u64)) -> Vec<PageIndex> {
        let cache = &self.fs.cache;
        let mut out = Vec::new();
        cache.scan(
            &inode.pages,
            inode.id,
            PageIndex(lo),
            PageIndex(hi),
            |i, s, dirty| {
                if dirty && !cache.logged(s) {
                    out.push(i);
                }
            },
        );
        out
    }

    /// A small sync: stages the bytes of every dirty page no data record
    /// holds as data records, after the inode's record if its metadata
    /// changed, all together (a record mapping a new block never becomes
    /// durable without the block's bytes). The pages stay dirty, marked
    /// logged; writeback writes them to their blocks later and logs a home
    /// record then. With writers held off, so no page changes or gets a
    /// block meanwhile. `None` if the sync has more pages than
    /// `Config::log_data_pages` or the log has no room for their data.
    async fn capture_logged(&self, inode: &Inode, j: &Journal) -> Result<Option<u64>> {
        let limit = self.fs.config.log_data_pages as usize;
        let fits = |n: usize| n <= limit && j.data_room(n);
        if limit == 0 {
            return Ok(None);
        }
        let n = self.unlogged_pages(inode, inode.log_range(true)).len();
        if !fits(n) {
            if n <= limit {
                // The last resort: the share is full, this sync writes the
                // file's pages home (see `home`).
                self.counters.add(Counter::home_on_sync, 1);
                self.wake_background();
            }
            return Ok(None);
        }
        if n == 0 && !inode.meta_dirty() {
            // Nothing to log: what others' writebacks are writing, then a
            // commit of everything staged (data records of logged pages
            // among it).
            self.wait_writebacks(inode).await;
            return Ok(Some(j.ticket()));
        }
        let held = Held::new();
        let _inode_lock = self.inode_lock(inode, Mode::Exclusive, &held).await;
        let _unblock = self.drain_writers(inode).await;
        let io = inode.begin_io();
        let staged = self.log_pages(inode, j, fits).await;
        inode.end_io(io);
        if staged? {
            // As `writeback` does for a sync; the ticket, taken after, also
            // covers the home records those writebacks logged.
            self.wait_writebacks(inode).await;
            Ok(Some(j.ticket()))
        } else {
            Ok(None)
        }
    }

    /// [`Session::capture_logged`]'s work under its locks, registered as
    /// a writeback: false if the pages do not fit after all.
    async fn log_pages(
        &self,
        inode: &Inode,
        j: &Journal,
        fits: impl Fn(usize) -> bool,
    ) -> Result<bool> {
        let cache = &self.fs.cache;
        let mut claimed: Vec<(PageIndex, u32)> = Vec::new();
        // Taken: pages given new bytes from now on widen it again.
        let range = inode.log_range(false);
        let mut want = self.unlogged_pages(inode, range);
        if !fits(want.len()) {
            inode.restore_log_range(range);
            return Ok(false);
        }
        // Claim them all. A page that is busy is being read in or written
        // by another writeback, which ends without waiting for anything
        // held here.
        while !want.is_empty() {
            let mut busy = Vec::new();
            for index in want.drain(..) {
                match cache.begin_log(&inode.pages, inode.id, index) {
                    Claim::Done(slot, _) => {
                        inode.dirty_dec();
                        claimed.push((index, slot));
                    }
                    Claim::Busy(slot) => busy.push((index, slot)),
                    Claim::Miss => {}
                }
            }
            for &(index, slot) in &busy {
                cache
                    .wait_clear(
                        slot,
                        crate::cache::state::LOCKED | crate::cache::state::WRITEBACK,
                    )
                    .await;
                want.push(index);
            }
        }
        let records = self.data_records(inode, &claimed);
        let staged = match records {
            Ok(data) => {
                let seq = inode.seq_to_stage();
                let head = seq.map(|seq| {
                    (
                        Record::Inode {
                            ino: inode.id.0,
                            meta: inode.meta(),
                        },
                        Some(seq),
                    )
                });
                {
                    // Under the namespace lock, as `capture` stages its
                    // record.
                    let _tree = self.fs.tree.read();
                    j.stage_all(head.into_iter().chain(data.into_iter().map(|r| (r, None))));
                    if let Some(seq) = seq {
                        inode.staged(seq);
                    }
                }
                self.wake_background();
                Ok(true)
            }
            Err(e) => Err(e),
        };
        for &(index, slot) in &claimed {
            match staged {
                Ok(_) if cache.end_logged(slot) => inode.dirty_inc_logged(index),
                Ok(_) => {}
                Err(_) if cache.end_writeback(slot, false) => inode.dirty_inc(index),
                Err(_) => inode.changed(index),
            }
        }
        staged
    }

    /// A data record of each claimed page: its block and its bytes.
    fn data_records(&self, inode: &Inode, claimed: &[(PageIndex, u32)]) -> Result<Vec<Record>> {
        let arena = self.fs.frames();
        let extents = inode.extents.read();
        let mut out = Vec::with_capacity(claimed.len());
        for &(index, slot) in claimed {
            let (block, _) = extents
                .lookup(index.0)
                .ok_or(crate::dev::DevError::InvalidRequest)?;
            let mut bytes = alloc::vec![0u8; PAGE_SIZE];
            arena.read(FrameId(slot), 0, &mut bytes)?;
            out.push(Record::Data {
                ino: inode.id.0,
                page: index.0,
                block: block.0,
                bytes,
            });
        }
        Ok(out)
    }

    /// Makes every file's written data, and every change to sizes, extents,
    /// attributes and names, durable: each inode with dirty pages or
    /// changed metadata is written back and captured, and one commit covers
    /// them all.
    pub async fn sync_all_files_async(&self) -> Result<()> {
        let _syncer = self.fs.journal.syncer();
        let inodes = self.fs.open_inodes();
        let mut kept: Vec<Kept> = Vec::new();
        let mut first_err = None;
        for inode in inodes.iter() {
            // The dirty count never undercounts: zero means no dirty page.
            if inode.dirty.load(Ordering::Acquire) == 0 && !inode.meta_dirty() {
                continue;
            }
            let c = self.capture(inode, &self.fs.journal).await.map(|(k, _)| k);
            match c {
                Ok(k) => kept.push((inode.clone(), k)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        let j = &self.fs.journal;
        let committed = j.commit(&self.meta_env(), j.ticket()).await;
        for (inode, k) in &kept {
            self.release_kept(inode, k, committed.is_ok());
        }
        drop(inodes);
        match first_err {
            Some(e) => Err(e),
            None => committed,
        }
    }

    /// Makes directory `dir`'s entries durable: a commit of every record
    /// staged so far (namespace changes are staged as they are made), with
    /// the directory's own record if its attributes changed.
    pub async fn sync_dir_async(&self, dir: InodeId) -> Result<()> {
        let inode = self
            .fs
            .inode(dir)
            .ok_or(crate::error::NamespaceError::NotFound)?;
        if inode.kind != crate::persist::record::Kind::Dir {
            return Err(crate::error::NamespaceError::NotADirectory.into());
        }
        self.counters.add(Counter::syncs, 1);
        let j = &self.fs.journal;
        let _syncer = j.syncer();
        let (_, ticket) = self.capture(&inode, j).await?;
        j.commit(&self.meta_env(), ticket).await
    }

    /// Writes every dirty page to its block, logged pages included, so
    /// the next checkpoint carries no data (for unmount).
    pub(crate) async fn write_home(&self) -> Result<()> {
        let inodes = self.fs.open_inodes();
        let mut result = Ok(());
        for inode in inodes.iter() {
            if result.is_ok() && inode.dirty.load(Ordering::Acquire) > 0 {
                result = self.writeback(inode, false).await.map(|_| ());
            }
        }
        result
    }

    /// Synchronous [`Session::sync_dir_async`].
    pub fn sync_dir(&self, dir: InodeId) -> Result<()> {
        self.block_on(self.sync_dir_async(dir))
    }

    /// Synchronous [`Session::sync_all_files_async`].
    pub fn sync_all_files(&self) -> Result<()> {
        self.block_on(self.sync_all_files_async())
    }

    /// Writes a checkpoint of everything durable (for unmount).
    pub(crate) fn checkpoint(&self) -> Result<()> {
        self.block_on(self.fs.journal.checkpoint_now(&self.meta_env()))
    }

    /// A checkpoint off the sync path, if the log is more than half full
    /// (see `home`); true if it wrote one.
    pub(super) async fn checkpoint_step(&self) -> Result<bool> {
        // Frames of its own: commits write theirs meanwhile.
        let env = SessionEnv {
            session: self,
            frames: self.fs.checkpoint_frames(),
        };
        let wrote = self.fs.journal.checkpoint_background(&env).await?;
        if wrote {
            self.counters.add(Counter::background_checkpoints, 1);
        }
        Ok(wrote)
    }

    fn meta_env(&self) -> SessionEnv<'_, D> {
        SessionEnv {
            session: self,
            frames: self.fs.commit_frames(),
        }
    }
}

/// A session lending its queue and the metadata frames to the journal.
struct SessionEnv<'a, D: BlockDevice> {
    session: &'a Session<D>,
    frames: Range<u32>,
}

impl<D: BlockDevice> SessionEnv<'_, D> {
    fn per_command(&self) -> usize {
        self.frames
            .len()
            .min(self.session.fs.geometry.max_frames_per_command())
    }

    fn lba(&self, block: u64) -> Lba {
        Lba(block * self.session.fs.geometry.blocks_per_page())
    }
}

impl<D: BlockDevice> MetaIo for SessionEnv<'_, D> {
    async fn read(&self, block: u64, n: usize) -> Result<Vec<u8>> {
        let arena = self.session.fs.frames();
        let mut out = alloc::vec![0u8; n * PAGE_SIZE];
        for (at, k, done) in chunks(block, n, self.per_command()) {
            let frames: Vec<FrameId> = (0..k as u32)
                .map(|i| FrameId(self.frames.start + i))
                .collect();
            self.session
                .run(&Command::Read {
                    lba: self.lba(at),
                    frames: &frames,
                })
                .await?;
            for (i, f) in frames.iter().enumerate() {
                let off = (done + i) * PAGE_SIZE;
                arena.read(*f, 0, &mut out[off..off + PAGE_SIZE])?;
            }
        }
        Ok(out)
    }

    async fn write(&self, block: u64, bytes: &[u8], fua: bool) -> Result<()> {
        // A device without FUA: the same writes, then a flush.
        let native = fua && self.session.fs.geometry.fua;
        let arena = self.session.fs.frames();
        for (at, k, done) in chunks(block, bytes.len() / PAGE_SIZE, self.per_command()) {
            let frames: Vec<FrameId> = (0..k as u32)
                .map(|i| FrameId(self.frames.start + i))
                .collect();
            for (i, f) in frames.iter().enumerate() {
                let off = (done + i) * PAGE_SIZE;
                arena.write(*f, 0, &bytes[off..off + PAGE_SIZE])?;
            }
            let written = self
                .session
                .run(&Command::Write {
                    lba: self.lba(at),
                    frames: &frames,
                    fua: native,
                })
                .await;
            if !native {
                // Unflushed until a flush: checkpoint frames go to free
                // blocks, which a file may get if the checkpoint fails
                // before its flush (see `volatile`).
                self.session.fs.volatile.note();
            }
            written?;
        }
        if fua && !native {
            self.session.flush().await?;
        }
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        Ok(self.session.flush().await?)
    }
}

impl<D: BlockDevice> CommitEnv for SessionEnv<'_, D> {
    fn alloc_meta(&self, hint: u64, max: u64) -> Option<(u64, u64)> {
        self.session
            .fs
            .space
            .lock()
            .alloc(BlockNo(hint), max)
            .map(|(b, n)| (b.0, n))
    }

    fn free_meta(&self, runs: &[(u64, u64)]) {
        let mut space = self.session.fs.space.lock();
        for &(b, n) in runs {
            // A failure means the maps disagree; the invariant checker
            // reports it.
            let _ = space.free(BlockNo(b), n);
        }
    }

    async fn release(&self, frees: Vec<PendingFree>) {
        let bpp = self.session.fs.geometry.blocks_per_page();
        for f in &frees {
            // Trim is advice: the blocks are free whatever the device says.
            let _ = self
                .session
                .run(&Command::Deallocate {
                    lba: Lba(f.dev.0 * bpp),
                    blocks: f.len * bpp,
                })
                .await;
            // Unflushed until the next flush: a FUA write home to these
            // blocks, once another file has them, must come after one.
            self.session.fs.volatile.note();
        }
        let mut space = self.session.fs.space.lock();
        for f in frees {
            let _ = space.free(f.dev, f.len);
        }
    }

    fn logged(&self, ino: u64, seq: u64) {
        // Not built if not in memory: this runs under the journal's state
        // lock, and an inode not in memory counts on from the journal's
        // durable sequence anyway.
        if let Some(inode) = self.session.fs.loaded(InodeId(ino)) {
            inode.logged_seq.fetch_max(seq, Ordering::AcqRel);
        }
    }

    fn take_unflushed(&self) -> bool {
        self.session.fs.unflushed.swap(0, Ordering::AcqRel) > 0
    }

    fn unflushed_again(&self) {
        self.session.fs.unflushed.fetch_add(1, Ordering::AcqRel);
    }

    fn counted(&self, written: Written) {
        let c = &self.session.counters;
        match written {
            Written::Log { bytes } => {
                c.add(Counter::log_writes, 1);
                c.add(Counter::log_bytes, bytes);
                self.session.wake_background();
            }
            Written::Checkpoint { bytes, nanos } => {
                c.add(Counter::checkpoints, 1);
                c.add(Counter::checkpoint_bytes, bytes);
                c.add(Counter::checkpoint_nanos, nanos);
            }
        }
    }

    fn now(&self) -> Nanos {
        (self.session.fs.config.clock)()
    }
}

#[cfg(test)]
mod tests {
    use crate::dev::fault::{FaultPlan, FaultyDevice};
    use crate::dev::ram::RamDevice;
    use crate::dev::{CommandKind, DevError};
    use crate::fs::{Config, Fs};

    fn config() -> Config {
        Config {
            cache_pages: 32,
            dirty_limit_pages: 16,
            ..Config::default()
        }
    }

    fn device() -> RamDevice {
        RamDevice::new(16 << 20, 4096, 64).unwrap()
    }

    /// A checkpoint that fails at any of its commands (a page, a live
    /// page's copy, the flush, the superblock: each in turn fails, with
    /// every command after it) loses nothing and leaks nothing: the
    /// blocks it took go back or stay held, the next checkpoint lands,
    /// and a remount holds every file.
    #[test]
    fn a_checkpoint_that_fails_at_any_command_loses_and_leaks_nothing() {
        let mut failures = 0;
        for n in 0.. {
            let plan = FaultPlan::new();
            let dev = device();
            let fs = Fs::format(FaultyDevice::new(dev.clone(), plan.clone()), config(), 3).unwrap();
            let s = fs.session().unwrap();
            for i in 0..40u8 {
                let f = fs.create(&alloc::format!("f{i}")).unwrap();
                s.write_all_at(&f, &[i; 5000], 0).unwrap();
            }
            fs.sync().unwrap();
            plan.fail_after(n);
            let failed = s.checkpoint().is_err();
            plan.heal();
            fs.check_invariants().unwrap();
            s.checkpoint().unwrap();
            fs.check_invariants().unwrap();
            drop(s);
            drop(fs);
            let fs = Fs::mount(FaultyDevice::new(dev, FaultPlan::new()), config()).unwrap();
            let s = fs.session().unwrap();
            for i in 0..40u8 {
                let f = fs.open(&alloc::format!("f{i}")).unwrap();
                let mut buf = [0u8; 5000];
                s.read_exact_at(&f, &mut buf, 0).unwrap();
                assert!(
                    buf.iter().all(|&b| b == i),
                    "f{i} after failing at command {n}"
                );
            }
            drop(s);
            fs.check_invariants().unwrap();
            if !failed {
                break;
            }
            failures += 1;
        }
        // Pages, a flush and a superblock at least.
        assert!(failures >= 3, "{failures} commands failed");
    }

    #[test]
    fn a_failed_flush_keeps_the_pages_dirty_until_a_sync_succeeds() {
        // Fs::new: the memory journal, whose commit is the flush.
        let plan = FaultPlan::new();
        let fs = Fs::new(FaultyDevice::new(device(), plan.clone()), config()).unwrap();
        let s = fs.session().unwrap();
        let f = fs.create("a").unwrap();
        s.write_all_at(&f, &[3; 3 * 4096], 0).unwrap();
        assert!(f.inode.meta_dirty());
        plan.fail(CommandKind::Flush, 1, DevError::Media);
        assert!(s.sync_data(&f).is_err());
        assert_eq!(fs.dirty_pages(), 3, "not durable: dirty again");
        assert!(f.inode.meta_dirty(), "its size is not durable either");
        s.sync_data(&f).unwrap();
        assert_eq!(fs.dirty_pages(), 0);
        assert!(!f.inode.meta_dirty(), "the commit covered its record");
    }

    #[test]
    fn syncs_retried_after_failed_commits_queue_an_unchanged_inode_once() {
        let plan = FaultPlan::new();
        let fs = Fs::format(FaultyDevice::new(device(), plan.clone()), config(), 1).unwrap();
        let s = fs.session().unwrap();
        let f = fs.create("a").unwrap();
        s.write_all_at(&f, &[5; 2 * 4096], 0).unwrap();
        let crate::persist::Journal::Log(log) = &fs.shared.journal else {
            panic!("a formatted filesystem has a log");
        };
        for _ in 0..4 {
            plan.fail(CommandKind::Write, 1, DevError::Media);
            assert!(s.sync_data(&f).is_err());
            plan.fail(CommandKind::Write, 1, DevError::Media);
            assert!(s.sync_all_files().is_err());
        }
        assert_eq!(
            log.queued_inode_records(),
            2,
            "the create's record, then the sync's once, not once per try"
        );
        s.write_all_at(&f, &[7; 4096], 16 << 20).unwrap();
        s.sync_data(&f).unwrap();
        assert!(!f.inode.meta_dirty());
        assert_eq!(log.queued_inode_records(), 0);
    }

    #[test]
    fn a_small_sync_logs_its_pages_and_an_unchanged_file_commits_nothing() {
        let fs = Fs::format(device(), config(), 1).unwrap();
        let s = fs.session().unwrap();
        let f = fs.create("a").unwrap();
        s.write_all_at(&f, &[4; 4096], 0).unwrap();
        let before = fs.stats();
        s.sync_data(&f).unwrap();
        let after = fs.stats();
        assert_eq!(after.log_writes, before.log_writes + 1);
        assert_eq!(after.checkpoints, before.checkpoints);
        // In the log, not yet at home: the page stays dirty, logged.
        assert_eq!(fs.dirty_pages(), 1);
        s.sync_data(&f).unwrap();
        assert_eq!(fs.stats().log_writes, after.log_writes, "nothing new");
        assert_eq!(fs.stats().dev_flushes, after.dev_flushes);
    }

    #[test]
    fn a_lone_sync_commits_at_once_and_one_beside_another_sync_gives_it_a_turn() {
        use core::future::Future;
        use core::task::{Context, Poll, Waker};
        let fs = Fs::format(device(), config(), 3).unwrap();
        let s = fs.session().unwrap();
        let f = fs.create("a").unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        s.write_all_at(&f, &[5; 4096], 0).unwrap();
        let before = fs.stats().log_writes;
        let lone = core::pin::pin!(s.sync_data_async(&f));
        assert!(
            lone.poll(&mut cx).is_ready(),
            "no other sync: the commit leads at once"
        );
        assert_eq!(fs.stats().log_writes, before + 1);
        // Another sync under way (counted, not yet staged): the commit
        // yields once, so that sync could stage into its batch.
        s.write_all_at(&f, &[6; 4096], 4096).unwrap();
        let other = fs.shared.journal.syncer();
        let mut beside = core::pin::pin!(s.sync_data_async(&f));
        assert!(beside.as_mut().poll(&mut cx).is_pending(), "gave a turn");
        assert_eq!(fs.stats().log_writes, before + 1, "not yet written");
        assert!(matches!(beside.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
        assert_eq!(fs.stats().log_writes, before + 2);
        drop(other);
    }

    #[test]
    fn syncing_everything_is_one_commit_for_every_file() {
        let fs = Fs::format(device(), config(), 2).unwrap();
        let s = fs.session().unwrap();
        let files: alloc::vec::Vec<_> = (0..3)
            .map(|i| {
                let f = fs.create(&alloc::format!("f{i}")).unwrap();
                s.write_all_at(&f, &[i as u8 + 1; 5000], 0).unwrap();
                f
            })
            .collect();
        let before = fs.stats();
        fs.sync().unwrap();
        let after = fs.stats();
        assert_eq!(
            after.log_writes + after.checkpoints,
            before.log_writes + before.checkpoints + 1
        );
        for f in &files {
            assert!(!f.inode.meta_dirty());
        }
    }
}
