//! Size changes and hole punching: the operations that take blocks away.
//!
//! Both close the invalidate gate over the range they drop before touching
//! any page, so no reader or writer can bring a page back from a block that
//! is about to be freed (the bug Linux's invalidate_lock fixed), and both
//! free blocks only after every page over them is gone and every I/O on
//! them has finished.

use alloc::vec::Vec;

use super::inode::{pages_for, Inode, Unblock};
use super::{Session, MAX_FILE_SIZE};
use crate::cache::{Claim, Insert};
use crate::dev::{BlockDevice, Command, FrameArena};
use crate::error::{RangeError, Result};
use crate::lock::{Held, Mode};
use crate::units::{ByteRange, FrameId, Lba, PageIndex, PAGE_SIZE, PAGE_SIZE_U64};
use core::sync::atomic::Ordering;

/// What [`Session::hold_page`] found.
enum Hold {
    /// The page, held.
    Held(HeldPage),
    /// The page is a hole.
    Hole,
    /// No cache slot was free and the caller asked not to wait.
    NoRoom,
}

impl Hold {
    fn held(self) -> Option<HeldPage> {
        match self {
            Hold::Held(h) => Some(h),
            Hold::Hole | Hold::NoRoom => None,
        }
    }
}

/// A page held for a partial zeroing.
enum HeldPage {
    /// Cached and pinned.
    Pinned(u32),
    /// Inserted locked and read in; finishing the fill releases it.
    Filling(PageIndex, u32),
}

impl<D: BlockDevice> Session<D> {
    /// Truncates or extends the file to `new` bytes.
    pub(crate) async fn resize_inode(&self, inode: &Inode, new: u64) -> Result<()> {
        let resized = self.resize(inode, new).await;
        if resized.is_ok() {
            inode.touch((self.fs.config.wall_clock)());
        }
        resized
    }

    async fn resize(&self, inode: &Inode, new: u64) -> Result<()> {
        if new > MAX_FILE_SIZE {
            return Err(RangeError::TooLarge.into());
        }
        let held = Held::new();
        let _inode_lock = self.inode_lock(inode, Mode::Exclusive, &held).await;
        let old = inode.size();
        if new >= old {
            // No block is mapped past the page holding EOF; that page's
            // bytes past EOF are zeroed now (the device may hold older
            // bytes there, written before a crash).
            if new > old {
                self.zero_past_eof(inode, old).await?;
            }
            inode.size.store(new, Ordering::Release);
            inode.meta_changed();
            return Ok(());
        }
        inode.writers().block();
        let _unblock = Unblock(inode.writers());
        #[cfg(pollfs_mutants)]
        let drain = !crate::mutants::active(crate::mutants::Mutant::TruncateSkipsDrain);
        #[cfg(not(pollfs_mutants))]
        let drain = true;
        if drain {
            inode.writers().drained().await;
        }
        let keep = pages_for(new);
        let tail = PageIndex::containing(new);
        let _gate = self
            .lock(
                &inode.gate,
                ByteRange::from(tail.byte_offset()),
                Mode::Exclusive,
                &held,
            )
            .await;
        // Bring in the page that will hold EOF before changing anything, so
        // a read error leaves the file as it was.
        let in_tail = (new % PAGE_SIZE_U64) as usize;
        let edge = match in_tail {
            0 => None,
            _ => self.hold_page(inode, tail, true).await?.held(),
        };
        inode.size.store(new, Ordering::Release);
        inode.meta_changed();
        self.drop_pages(inode, keep, u64::MAX).await;
        let zeroed = match edge {
            Some(edge) => self.zero_held(inode, edge, in_tail, PAGE_SIZE),
            None => Ok(()),
        };
        self.free_blocks(inode, keep, u64::MAX).await;
        zeroed
    }

    /// Makes `[off, off + len)` read as zeros and frees the whole blocks in
    /// it. The size does not change; the part past EOF is ignored.
    pub(crate) async fn punch_inode(&self, inode: &Inode, off: u64, len: u64) -> Result<()> {
        let punched = self.punch(inode, off, len).await;
        if punched.is_ok() {
            inode.touch((self.fs.config.wall_clock)());
        }
        punched
    }

    async fn punch(&self, inode: &Inode, off: u64, len: u64) -> Result<()> {
        let range = ByteRange::at(off, len).ok_or(RangeError::Overflow)?;
        if range.end > MAX_FILE_SIZE {
            return Err(RangeError::TooLarge.into());
        }
        let held = Held::new();
        let _inode_lock = self.inode_lock(inode, Mode::Exclusive, &held).await;
        let range = ByteRange::new(range.start, range.end.min(inode.size()));
        if range.is_empty() {
            return Ok(());
        }
        // Writers inside EOF hold no inode lock: shut them out and wait for
        // the ones in flight, as truncate does.
        let _unblock = self.drain_writers(inode).await;
        let (first, last) = range.pages();
        let full_start = range.start.div_ceil(PAGE_SIZE_U64);
        let full_end = range.end / PAGE_SIZE_U64;
        #[cfg(pollfs_mutants)]
        let early = crate::mutants::active(crate::mutants::Mutant::PunchDropsBeforeGate);
        #[cfg(not(pollfs_mutants))]
        let early = false;
        if early && full_start < full_end {
            self.drop_pages(inode, full_start, full_end).await;
        }
        let gate_range = ByteRange::new(first.byte_offset(), last.byte_offset());
        let _gate = self
            .lock(&inode.gate, gate_range, Mode::Exclusive, &held)
            .await;
        // Bring in the partial pages at the edges before changing anything,
        // so a read error leaves the range as it was. Never wait for cache
        // room while holding the first edge: let it go and start again.
        let edges = loop {
            let mut edges: Vec<(u64, HeldPage)> = Vec::new();
            let mut no_room = false;
            for index in [first.0, last.0 - 1] {
                let whole = index >= full_start && index < full_end;
                if whole || edges.iter().any(|(e, _)| *e == index) {
                    continue;
                }
                match self
                    .hold_page(inode, PageIndex(index), edges.is_empty())
                    .await
                {
                    Ok(Hold::Held(h)) => edges.push((index, h)),
                    Ok(Hold::Hole) => {}
                    Ok(Hold::NoRoom) => no_room = true,
                    Err(e) => {
                        for (_, h) in edges {
                            self.release_held(inode, h);
                        }
                        return Err(e);
                    }
                }
            }
            if !no_room {
                break edges;
            }
            for (_, h) in edges {
                self.release_held(inode, h);
            }
            self.make_room(2).await?;
        };
        if full_start < full_end {
            if !early {
                self.drop_pages(inode, full_start, full_end).await;
            }
            self.free_blocks(inode, full_start, full_end).await;
        }
        let mut zeroed = Ok(());
        for (index, h) in edges {
            let page = ByteRange::new(index * PAGE_SIZE_U64, (index + 1) * PAGE_SIZE_U64);
            let from = range.start.max(page.start) - page.start;
            let to = range.end.min(page.end) - page.start;
            let z = self.zero_held(inode, h, from as usize, to as usize);
            zeroed = zeroed.and(z);
        }
        zeroed
    }

    /// Drops every cached page of `inode` in `[start, end)`, waiting for
    /// pages under I/O. The caller holds the gate exclusively over the range.
    pub(super) async fn drop_pages(&self, inode: &Inode, start: u64, end: u64) {
        let cache = &self.fs.cache;
        loop {
            let mut cached = Vec::new();
            cache.scan(
                &inode.pages,
                inode.id,
                PageIndex(start),
                PageIndex(end),
                |i, _, _| cached.push(i),
            );
            if cached.is_empty() {
                return;
            }
            for index in cached {
                match cache.invalidate(&inode.pages, inode.id, index) {
                    Claim::Done(_, was_dirty) => {
                        if was_dirty {
                            inode.dirty_dec();
                        }
                    }
                    Claim::Busy(slot) => cache.wait_idle(slot).await,
                    Claim::Miss => {}
                }
            }
        }
    }

    /// Holds page `index` for zeroing part of it: pinned if cached, else
    /// inserted locked and read in. [`Hold::Hole`] for a hole, whose cached
    /// copy (if any) is all zeros already. Without `wait_for_room`, returns
    /// [`Hold::NoRoom`] instead of waiting for a cache slot (for a caller
    /// that already holds a page). Truncate and punch-hole hold the gate
    /// over the page; growing a file needs no gate, as it drops nothing.
    async fn hold_page(
        &self,
        inode: &Inode,
        index: PageIndex,
        wait_for_room: bool,
    ) -> Result<Hold> {
        let cache = &self.fs.cache;
        loop {
            if inode.extents.read().lookup(index.0).is_none() {
                return Ok(Hold::Hole);
            }
            match cache.pin(&inode.pages, inode.id, index) {
                Claim::Done(slot, _) => return Ok(Hold::Held(HeldPage::Pinned(slot))),
                Claim::Busy(slot) => {
                    cache.wait_idle(slot).await;
                    continue;
                }
                Claim::Miss => {}
            }
            match cache.insert(&inode.pages, inode.id, index) {
                Insert::New { slot, .. } => {
                    if let Err(e) = self.load(inode, &[(index, slot)]).await {
                        cache.finish_fill(&inode.pages, index, slot, false, false);
                        return Err(e);
                    }
                    return Ok(Hold::Held(HeldPage::Filling(index, slot)));
                }
                Insert::Existing(_) => {}
                Insert::Full if wait_for_room => self.make_room(1).await?,
                Insert::Full => return Ok(Hold::NoRoom),
            }
        }
    }

    /// Zeroes the bytes of the page holding `old_size` that lie past it, and
    /// dirties the page, before the file grows past `old_size`. In memory
    /// they are zero already, but the device block may hold bytes written
    /// there before a crash that the durable size never covered (xfs's
    /// `xfs_zero_eof`); the zeros reach the device before any record that
    /// makes them part of the file. The caller holds the inode lock.
    pub(crate) async fn zero_past_eof(&self, inode: &Inode, old_size: u64) -> Result<()> {
        let in_page = (old_size % PAGE_SIZE_U64) as usize;
        if in_page == 0 {
            return Ok(());
        }
        if let Hold::Held(page) = self
            .hold_page(inode, PageIndex::containing(old_size), true)
            .await?
        {
            self.zero_held(inode, page, in_page, PAGE_SIZE)?;
        }
        Ok(())
    }

    /// Zeroes `[from, to)` of a held page, dirties and releases it (or
    /// releases it unchanged if the frame refuses the fill).
    fn zero_held(&self, inode: &Inode, page: HeldPage, from: usize, to: usize) -> Result<()> {
        let cache = &self.fs.cache;
        let slot = match page {
            HeldPage::Pinned(s) | HeldPage::Filling(_, s) => s,
        };
        if let Err(e) = self.fs.frames().fill(FrameId(slot), from, to - from, 0) {
            self.release_held(inode, page);
            return Err(e.into());
        }
        let index = cache.index_of(slot);
        let dirtied = match page {
            HeldPage::Pinned(slot) => cache.unpin(slot, true),
            HeldPage::Filling(index, slot) => {
                cache.finish_fill(&inode.pages, index, slot, true, true)
            }
        };
        if dirtied {
            inode.dirty_inc(index);
        } else {
            inode.changed(index);
        }
        Ok(())
    }

    /// Releases a held page unchanged.
    fn release_held(&self, inode: &Inode, page: HeldPage) {
        match page {
            HeldPage::Pinned(slot) => {
                self.fs.cache.unpin(slot, false);
            }
            HeldPage::Filling(index, slot) => {
                self.fs
                    .cache
                    .finish_fill(&inode.pages, index, slot, true, false);
            }
        }
    }

    /// Unmaps file blocks `[start, end)`, trims them, and returns them to the
    /// allocator once the trim has completed (so a trim can never hit a
    /// block after it was given to someone else). On a filesystem with a
    /// log, the blocks are held (and not trimmed) until a durable record
    /// stops referencing them: after a crash the old metadata may still
    /// point at them, and must find the old data there.
    async fn free_blocks(&self, inode: &Inode, start: u64, end: u64) {
        let freed = {
            let mut extents = inode.extents.write();
            let freed = extents.remove(start, end);
            self.fs.meta_len_changed(inode, extents.len(), false);
            freed
        };
        let bpp = self.fs.geometry.blocks_per_page();
        let trim = self.fs.journal.trims_frees();
        for e in &freed {
            inode.meta_changed();
            let cmd = Command::Deallocate {
                lba: Lba(e.dev.0 * bpp),
                blocks: e.len * bpp,
            };
            // Trim is advice: if the device refuses, the blocks are still free
            // (their old bytes are never shown: new owners overwrite or zero
            // every page before it is read).
            if trim {
                let _ = self.run(&cmd).await;
            }
        }
        self.fs.free_extents(inode, &freed);
    }
}
