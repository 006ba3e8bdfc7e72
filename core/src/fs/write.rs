//! The write path: parallel writes inside EOF under extent locks, extending
//! writes under the inode lock, block allocation, dirty throttling.

use core::future::Future;
use core::sync::atomic::Ordering;

use super::inode::Inode;
use super::{Session, MAX_FILE_SIZE};
use crate::cache::{Claim, Insert};
use crate::dev::{BlockDevice, FrameArena};
use crate::error::{RangeError, Result, SpaceError};
use crate::lock::{Held, Mode};
use crate::stats::Counter;
use crate::units::{ByteRange, FrameId, PageIndex, PAGE_SIZE, PAGE_SIZE_U64};

/// How a write puts its bytes in its range: the part of
/// [`Session::write_outline`] that differs.
#[derive(Clone, Copy)]
pub(super) enum Copy<'a> {
    /// Through the page cache.
    Cached(&'a [u8]),
    /// Past the cache, to the device (whole pages; see `direct`).
    Direct(&'a [u8]),
}

impl<D: BlockDevice> Session<D> {
    /// Writes `buf` at `off`. Returns the bytes written: all of them, or a
    /// shorter count if the device filled up (or failed) after some pages
    /// were written; an error only if nothing was written. If the device
    /// is full while blocks freed by remove, truncate or punch-hole wait
    /// for a commit, commits (as [`Session::sync_all_files`]) and tries
    /// again: freed space is reusable without the caller syncing.
    pub(crate) async fn write_inode(&self, inode: &Inode, buf: &[u8], off: u64) -> Result<usize> {
        let written = self.with_room(|| self.write_once(inode, buf, off)).await;
        if written.as_ref().is_ok_and(|&n| n > 0) {
            // Lazily logged (see `Inode::mtime`): no record for this alone.
            inode.touch_data((self.fs.config.wall_clock)());
        }
        written
    }

    /// Runs `op`; if it finds the device full while blocks freed by
    /// remove, truncate or punch-hole wait for a commit
    /// ([`Shared::full_until_commit`](super::Shared)), commits (as
    /// [`Session::sync_all_files`]) and runs it once more: the outline of
    /// every operation that allocates data blocks.
    pub(super) async fn with_room<T, F>(&self, mut op: impl FnMut() -> F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let first = op().await;
        if !self.fs.full_until_commit(&first) {
            return first;
        }
        self.sync_all_files_async().await?;
        op().await
    }

    async fn write_once(&self, inode: &Inode, buf: &[u8], off: u64) -> Result<usize> {
        let range = ByteRange::at(off, buf.len() as u64).ok_or(RangeError::Overflow)?;
        if range.end > MAX_FILE_SIZE {
            return Err(RangeError::TooLarge.into());
        }
        if buf.is_empty() {
            return Ok(0);
        }
        self.throttle(inode).await?;
        self.write_outline(inode, range, Copy::Cached(buf)).await
    }

    /// The outline every write shares, buffered or direct: inside EOF,
    /// registered with the write drain (truncate and punch-hole wait for
    /// it) under the extent lock alone; otherwise under the inode lock,
    /// with the old EOF page's tail zeroed when the write starts past it,
    /// and the new size published once the data is in place (so a reader
    /// that sees the size sees the bytes). `copy` is the part that
    /// differs; it returns how many bytes it wrote from `range.start`.
    pub(super) async fn write_outline(
        &self,
        inode: &Inode,
        range: ByteRange,
        copy: Copy<'_>,
    ) -> Result<usize> {
        let held = Held::new();
        if !self.fs.config.file_lock {
            if let Some(slot) = inode.writers().try_enter(self.drain_hint) {
                // Fast path: inside EOF, the extent lock is enough. Truncate
                // and punch-hole cannot start while we are registered.
                if range.end <= inode.size() {
                    let r = self.copy(inode, range, copy, &held).await;
                    inode.writers().exit(slot);
                    return r;
                }
                inode.writers().exit(slot);
            }
        }
        #[cfg(pollfs_mutants)]
        if crate::mutants::active(crate::mutants::Mutant::ExtendWithoutInodeLock) {
            let n = self.copy(inode, range, copy, &held).await?;
            inode.size.store(range.start + n as u64, Ordering::Release);
            return Ok(n);
        }
        let _inode_lock = self.inode_lock(inode, Mode::Exclusive, &held).await;
        let old = inode.size();
        if range.start > old {
            // The bytes between the old EOF and this write become part of
            // the file: make sure they read as zeros.
            self.zero_past_eof(inode, old).await?;
        }
        let n = self.copy(inode, range, copy, &held).await?;
        let new_end = range.start + n as u64;
        if new_end > inode.size() {
            inode.size.store(new_end, Ordering::Release);
            inode.meta_changed();
        }
        Ok(n)
    }

    async fn copy(
        &self,
        inode: &Inode,
        range: ByteRange,
        copy: Copy<'_>,
        held: &Held,
    ) -> Result<usize> {
        match copy {
            Copy::Cached(buf) => self.write_locked(inode, buf, range, held).await,
            Copy::Direct(buf) => self.write_direct_locked(inode, buf, range, held).await,
        }
    }

    /// Copies `buf` into the pages of `range` holding the extent lock
    /// (exclusive) over it. The caller is registered with the write drain or
    /// holds the inode lock, so no truncate or punch-hole runs meanwhile.
    async fn write_locked(
        &self,
        inode: &Inode,
        buf: &[u8],
        range: ByteRange,
        held: &Held,
    ) -> Result<usize> {
        let _extent = self
            .lock_striped(inode.extent_lock(), range, Mode::Exclusive, held)
            .await;
        let mut pos = range.start;
        while pos < range.end {
            // A large write must not dirty the whole cache: write back as it
            // goes. If writeback fails, stop here and report what was written.
            if pos != range.start && self.throttle(inode).await.is_err() {
                break;
            }
            let index = PageIndex::containing(pos);
            let in_page = (pos % PAGE_SIZE_U64) as usize;
            let n = (PAGE_SIZE - in_page).min((range.end - pos) as usize);
            let at = (pos - range.start) as usize;
            if let Err(e) = self
                .write_page(inode, index, in_page, &buf[at..at + n])
                .await
            {
                if pos == range.start {
                    return Err(e);
                }
                break;
            }
            pos += n as u64;
        }
        Ok((pos - range.start) as usize)
    }

    /// Copies `data` into page `index` at `in_page` and marks it dirty,
    /// bringing the page in first if the write covers only part of it.
    pub(super) async fn write_page(
        &self,
        inode: &Inode,
        index: PageIndex,
        in_page: usize,
        data: &[u8],
    ) -> Result<()> {
        let cache = &self.fs.cache;
        let arena = self.fs.frames();
        loop {
            match cache.pin(&inode.pages, inode.id, index) {
                Claim::Done(slot, mapped) => {
                    self.counters.add(Counter::cache_hits, 1);
                    if !mapped {
                        if let Err(e) = self.ensure_block(inode, index) {
                            cache.unpin(slot, false);
                            return Err(e);
                        }
                        cache.mark_mapped(slot);
                    }
                    if let Err(e) = arena.write(FrameId(slot), in_page, data) {
                        cache.unpin(slot, false);
                        return Err(e.into());
                    }
                    if cache.unpin(slot, true) {
                        inode.dirty_inc(index);
                    } else {
                        inode.changed(index);
                    }
                    return Ok(());
                }
                Claim::Busy(slot) => {
                    cache.wait_idle(slot).await;
                    continue;
                }
                Claim::Miss => {}
            }
            match cache.insert(&inode.pages, inode.id, index) {
                Insert::New { slot, evicted } => {
                    self.counters.add(Counter::cache_misses, 1);
                    if evicted {
                        self.counters.add(Counter::evictions, 1);
                    }
                    let whole = in_page == 0 && data.len() == PAGE_SIZE;
                    let filled = if whole {
                        Ok(())
                    } else {
                        self.load(inode, &[(index, slot)]).await
                    };
                    let ready = filled.and_then(|()| self.ensure_block(inode, index));
                    if let Err(e) = ready {
                        cache.finish_fill(&inode.pages, index, slot, false, false);
                        return Err(e);
                    }
                    cache.mark_mapped(slot);
                    if let Err(e) = arena.write(FrameId(slot), in_page, data) {
                        // The block stays mapped; the page, never written, goes.
                        cache.finish_fill(&inode.pages, index, slot, false, false);
                        return Err(e.into());
                    }
                    cache.finish_fill(&inode.pages, index, slot, true, true);
                    inode.dirty_inc(index);
                    return Ok(());
                }
                Insert::Existing(_) => continue,
                Insert::Full => self.make_room(1).await?,
            }
        }
    }

    /// Gives page `index` a device block if it has none. The caller holds
    /// the page (pinned or locked), so no reader can see the new block
    /// before the page's data is written to it.
    fn ensure_block(&self, inode: &Inode, index: PageIndex) -> Result<()> {
        let mut extents = inode.extents.write();
        if extents.lookup(index.0).is_some() {
            return Ok(());
        }
        // Place the block after the previous page's so that files written in
        // order are contiguous on the device.
        let hint = index
            .0
            .checked_sub(1)
            .and_then(|p| extents.lookup(p))
            .and_then(|(b, _)| b.checked_add(1))
            .unwrap_or_default();
        let block = self.fs.alloc_data(hint).ok_or(SpaceError::DeviceFull)?;
        extents.insert(index.0, block, 1);
        self.fs.meta_len_changed(inode, extents.len(), false);
        inode.meta_changed();
        Ok(())
    }

    /// Makes a writer write back dirty pages while the cache holds more than
    /// the dirty limit, instead of failing it.
    pub(super) async fn throttle(&self, inode: &Inode) -> Result<()> {
        if self.fs.cache.dirty_pages() <= self.fs.dirty_limit {
            return Ok(());
        }
        self.counters.add(Counter::dirty_throttles, 1);
        if inode.dirty.load(Ordering::Relaxed) > 0 {
            self.writeback(inode, false).await?;
        }
        if self.fs.cache.dirty_pages() > self.fs.dirty_limit {
            self.writeback_others().await?;
        }
        Ok(())
    }
}
