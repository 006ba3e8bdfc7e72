//! Writeback and sync: dirty pages go to the device in batches, one command
//! per run of pages contiguous in the file and on the device.
//!
//! A failed write leaves its pages dirty, so the data is never dropped and
//! the next sync tries again (and reports the error again if it fails).

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::inode::Inode;
use super::Session;
use crate::cache::{Claim, PageCache};
use crate::dev::{BlockDevice, Command, DevError};
use crate::error::Result;
use crate::persist::record::Record;
use crate::units::{FrameId, Lba, PageIndex};

/// A run of pages claimed for writeback.
pub(super) struct Run {
    pub(super) block: u64,
    pub(super) frames: Vec<FrameId>,
}

impl<D: BlockDevice> Session<D> {
    /// Writes back every dirty page of `inode`. With `keep`, the written
    /// pages stay pinned (cached, clean, re-dirtiable, written again by any
    /// later writeback) and are returned so a caller can release them after
    /// its flush with [`Session::release_kept`]; otherwise they are
    /// released as each write completes. A writeback only ever waits for
    /// pages whose device write is in flight or which are being filled,
    /// never for pages another sync keeps: two syncs of one file cannot
    /// wait for each other.
    ///
    /// Each writeback is registered with the inode from before it looks
    /// for dirty pages until its writes complete; a sync (`keep`) then
    /// waits for every writeback registered before it ended: a page it
    /// found clean (or never saw, its dirty range taken) may be under
    /// such a writeback's write, which its flush must follow. A
    /// registered writeback never waits for another's registration, and
    /// ends its own before waiting, so two syncs cannot wait for each
    /// other.
    pub(crate) async fn writeback(&self, inode: &Inode, keep: bool) -> Result<Vec<u32>> {
        let io = inode.begin_io();
        let written = self.writeback_pages(inode, keep).await;
        inode.end_io(io);
        if keep {
            self.wait_writebacks(inode).await;
        }
        written
    }

    async fn writeback_pages(&self, inode: &Inode, keep: bool) -> Result<Vec<u32>> {
        let cache = &self.fs.cache;
        let mut dirty = Vec::new();
        let (lo, hi) = inode.take_dirty_range();
        cache.scan(
            &inode.pages,
            inode.id,
            PageIndex(lo),
            PageIndex(hi),
            |i, _, d| {
                if d {
                    dirty.push(i)
                }
            },
        );
        let mut kept = Vec::new();
        let mut first_err: Option<DevError> = None;
        let mut pending = dirty;
        while !pending.is_empty() {
            // Claim every page that can be claimed now, and write those out
            // before waiting for any busy one: a claimed page nobody writes
            // would stall whoever waits for it (a punch-hole, say) while we
            // wait for a page that one holds.
            let mut claimed: Vec<(PageIndex, u32)> = Vec::with_capacity(pending.len());
            let mut busy = Vec::new();
            for index in pending.drain(..) {
                match cache.begin_writeback(&inode.pages, inode.id, index) {
                    Claim::Done(slot, _) => {
                        inode.dirty_dec();
                        claimed.push((index, slot));
                    }
                    // Dirty again while an earlier writeback of it is still
                    // in flight: wait for it and retry, or this sync would
                    // miss the new data.
                    Claim::Busy(slot) => busy.push((index, slot)),
                    Claim::Miss => {}
                }
            }
            self.write_claimed(inode, &claimed, keep, &mut kept, &mut first_err)
                .await;
            for (index, slot) in busy {
                cache
                    .wait_clear(
                        slot,
                        crate::cache::state::LOCKED | crate::cache::state::WRITEBACK,
                    )
                    .await;
                pending.push(index);
            }
        }
        match first_err {
            Some(e) => {
                // What was written is written; only the flush is not done.
                self.release_kept(inode, &kept, true);
                Err(e.into())
            }
            None => Ok(kept),
        }
    }

    /// Waits until every writeback of `inode` started so far has
    /// completed its writes (they complete without waiting for anything
    /// the caller holds).
    pub(crate) async fn wait_writebacks(&self, inode: &Inode) {
        let horizon = inode.io_horizon();
        while !inode.io_done_before(horizon) {
            crate::sync::yield_now().await;
        }
    }

    /// Releases pages kept by [`Session::writeback`]; if their flush failed
    /// (`durable` false) they are dirty again, so the data is written again.
    pub(crate) fn release_kept(&self, inode: &Inode, kept: &[u32], durable: bool) {
        #[cfg(pollfs_mutants)]
        if crate::mutants::active(crate::mutants::Mutant::SyncHoldsWriteback) {
            for &slot in kept {
                self.end(inode, &self.fs.cache, slot, durable);
            }
            return;
        }
        for &slot in kept {
            if self.fs.cache.release_kept(slot, durable) {
                inode.dirty_inc(self.fs.cache.index_of(slot));
            }
        }
    }

    /// Writes claimed pages, one command per device run; successful pages
    /// go to `kept` (with `keep`) or end their writeback; failed ones are
    /// dirty again and the first error is recorded.
    async fn write_claimed(
        &self,
        inode: &Inode,
        claimed: &[(PageIndex, u32)],
        keep: bool,
        kept: &mut Vec<u32>,
        first_err: &mut Option<DevError>,
    ) {
        let cache = &self.fs.cache;
        let (runs, orphans) = self.plan_runs(inode, claimed);
        for slot in orphans {
            // A dirty page without a block cannot happen (blocks are given
            // before pages are dirtied); keep its data and report it.
            self.end(inode, cache, slot, false);
            first_err.get_or_insert(DevError::InvalidRequest);
        }
        let bpp = self.fs.geometry.blocks_per_page();
        let mut inflight = Vec::with_capacity(runs.len());
        for run in &runs {
            let cmd = Command::Write {
                lba: Lba(run.block * bpp),
                frames: &run.frames,
                fua: false,
            };
            inflight.push(self.submit(&cmd).await);
        }
        for (run, submitted) in runs.iter().zip(inflight) {
            let result = match submitted {
                Ok(tag) => self.wait(tag).await,
                Err(e) => Err(e),
            };
            self.fs.volatile.note();
            if let Err(e) = result {
                first_err.get_or_insert(e);
            }
            if result.is_ok() {
                self.fs.unflushed.fetch_add(1, Ordering::AcqRel);
                self.log_home(inode, &run.frames);
            }
            for f in &run.frames {
                if keep && result.is_ok() {
                    #[cfg(pollfs_mutants)]
                    let planted =
                        crate::mutants::active(crate::mutants::Mutant::SyncHoldsWriteback);
                    #[cfg(not(pollfs_mutants))]
                    let planted = false;
                    if !planted {
                        cache.end_writeback_kept(f.0);
                    }
                    kept.push(f.0);
                } else {
                    self.end(inode, cache, f.0, result.is_ok());
                }
            }
        }
    }

    /// Logs a home record for each page of `frames` (just written to its
    /// block, still under writeback) that a data record holds: staged
    /// while the page is claimed, so it lands in the log after that data
    /// record and before any later one. Returns the ticket of the commit
    /// that makes them durable, if any was staged.
    pub(super) fn log_home(&self, inode: &Inode, frames: &[FrameId]) -> Option<u64> {
        let cache = &self.fs.cache;
        let homes: Vec<(Record, Option<u64>)> = frames
            .iter()
            .filter(|f| cache.in_log(f.0))
            .map(|f| {
                let page = cache.index_of(f.0).0;
                let home = Record::Home {
                    ino: inode.id.0,
                    page,
                };
                (home, None)
            })
            .collect();
        // One turn of the journal's lock for the run, not one per page.
        (!homes.is_empty()).then(|| self.fs.journal.stage_all(homes))
    }

    /// Ends writeback of `slot`, re-counting it as dirty on failure.
    pub(super) fn end(&self, inode: &Inode, cache: &PageCache, slot: u32, ok: bool) {
        if cache.end_writeback(slot, ok) {
            inode.dirty_inc(cache.index_of(slot));
        }
    }

    /// Groups claimed pages into device runs; returns pages with no block
    /// separately.
    pub(super) fn plan_runs(
        &self,
        inode: &Inode,
        claimed: &[(PageIndex, u32)],
    ) -> (Vec<Run>, Vec<u32>) {
        let max = self.fs.geometry.max_frames_per_command();
        let extents = inode.extents.read();
        let mut runs: Vec<Run> = Vec::new();
        let mut orphans = Vec::new();
        let mut prev: Option<(u64, u64)> = None;
        for &(index, slot) in claimed {
            let Some((block, _)) = extents.lookup(index.0) else {
                orphans.push(slot);
                prev = None;
                continue;
            };
            let contiguous = matches!(prev, Some((p, b)) if p + 1 == index.0 && b + 1 == block.0);
            match runs.last_mut() {
                Some(run) if contiguous && run.frames.len() < max => run.frames.push(FrameId(slot)),
                _ => runs.push(Run {
                    block: block.0,
                    frames: alloc::vec![FrameId(slot)],
                }),
            }
            prev = Some((index.0, block.0));
        }
        (runs, orphans)
    }

    /// Writes back other files' dirty pages, most dirty first, until the
    /// cache is under its dirty limit.
    pub(crate) async fn writeback_others(&self) -> Result<()> {
        let victims = self.fs.dirty_inodes();
        let mut result = Ok(());
        for inode in victims.iter() {
            if result.is_ok() && self.fs.cache.dirty_pages() > self.fs.dirty_limit / 2 {
                if let Err(e) = self.writeback(inode, false).await {
                    result = Err(e);
                }
            }
        }
        result
    }

    /// Writes back every dirty page of every file, then empties the cache of
    /// clean pages (like the kernel's `drop_caches`), so the next reads come
    /// from the device. Returns the number of pages dropped.
    pub async fn drop_caches_async(&self) -> Result<u64> {
        let dirty = self.fs.dirty_inodes();
        let mut result = Ok(());
        for inode in dirty.iter() {
            if result.is_ok() {
                result = self.writeback(inode, false).await.map(|_| ());
            }
        }
        result?;
        Ok(self.fs.cache.evict_clean())
    }

    /// Synchronous [`Session::drop_caches_async`].
    pub fn drop_caches(&self) -> Result<u64> {
        self.block_on(self.drop_caches_async())
    }

    /// `sync_data`/`sync_all`: writes back the file's dirty pages, then
    /// flushes the device. The written pages stay pinned under writeback
    /// until the flush succeeds; if it fails they are dirty again.
    pub(crate) async fn sync_inode(&self, inode: &Inode) -> Result<()> {
        self.sync_logged(inode, &self.fs.journal).await
    }
}
