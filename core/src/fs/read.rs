//! The read path: lockless cached reads, batched fills and readahead.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use super::inode::{pages_for, Inode};
use super::Session;
use crate::cache::{Insert, Lookup};
use crate::dev::{BlockDevice, Command, FrameArena};
use crate::error::Result;
use crate::lock::{Held, Mode};
use crate::stats::Counter;
use crate::units::{ByteRange, FrameId, Lba, PageIndex, PAGE_SIZE, PAGE_SIZE_U64};

/// Per-handle readahead state: where a sequential reader will read next,
/// and how far ahead to fill when it misses. One atomic word (next page in
/// the high 32 bits, window in the low), so a handle shared by threads
/// stays `Sync`; threads racing on it only blur a heuristic.
#[derive(Debug, Default)]
pub(crate) struct Readahead(AtomicU64);

impl Readahead {
    /// Updates the state for a read of pages `[first, end)` and returns the
    /// window to fill on a miss (0: only what the read needs).
    #[inline]
    fn on_read(&self, first: u64, end: u64, max: u32) -> u32 {
        let word = self.0.load(Ordering::Relaxed);
        let window = word as u32;
        let window = if !sequential(word, first) || max == 0 {
            0
        } else if window == 0 {
            (max / 8).clamp(4.min(max), max)
        } else {
            window.saturating_mul(2).min(max)
        };
        // Page indices are below 2^32 (the largest file).
        self.0.store(
            (end.min(u64::from(u32::MAX)) << 32) | u64::from(window),
            Ordering::Relaxed,
        );
        window
    }

    /// Updates the state for a read of pages `[first, end)` that found
    /// them all cached: as [`on_read`](Self::on_read) when the read
    /// continues a sequential run; a read anywhere else leaves the state
    /// as it is, so a random reader of cached pages stores nothing to the
    /// handle's shared word. (A run that starts at a cached page after a
    /// jump is then seen one read later: its first miss reads one page,
    /// the next one a window.)
    #[inline]
    fn on_hit(&self, first: u64, end: u64, max: u32) {
        if sequential(self.0.load(Ordering::Relaxed), first) {
            self.on_read(first, end, max);
        }
    }
}

/// Whether a read starting at page `first` continues the run the state
/// `word` records: it starts at the next page or on the page before it
/// (`first` is below 2^32, so the subtraction cannot wrap to 0 or 1 from
/// anywhere else).
#[inline]
fn sequential(word: u64, first: u64) -> bool {
    (word >> 32).wrapping_sub(first) < 2
}

/// What a fill found.
pub(crate) enum Fill {
    /// The page is present now (or being filled by someone else).
    Present,
    /// The page lies past EOF.
    Eof,
}

/// What is left of a read after the pages copied so far.
pub(crate) struct ReadPos {
    /// Where the read started.
    off: u64,
    /// The next byte to copy.
    pos: u64,
    /// Where it ends (EOF or the buffer's end, whichever is first).
    end: u64,
    /// The page past its last.
    last: u64,
    /// Readahead window for a miss.
    window: u32,
    /// The page this read filled last (its hit is not counted).
    just_filled: u64,
}

impl ReadPos {
    /// Bytes copied so far.
    fn done(&self) -> usize {
        (self.pos - self.off) as usize
    }
}

/// Why copying from the cache stopped.
enum Stop {
    /// The read is complete.
    Done,
    /// The page is being filled or written: wait for slot and try again.
    Busy(u32),
    /// The page is not in the cache.
    Miss(PageIndex),
}

/// A read tried without waiting (see [`Session::read_cached`]).
pub(crate) enum Cached {
    /// Complete, or failed.
    Done(Result<usize>),
    /// Stopped at a page that needs a wait or a fill.
    Rest(ReadPos),
    /// The configuration takes a file lock on reads: run the future.
    Locked,
}

impl<D: BlockDevice> Session<D> {
    /// Reads into `buf` from `off`. Takes no file-wide lock.
    pub(crate) async fn read_inode(
        &self,
        inode: &Inode,
        ra: &Readahead,
        buf: &mut [u8],
        off: u64,
    ) -> Result<usize> {
        let held = Held::new();
        let _file_lock = if self.fs.config.file_lock {
            Some(self.inode_lock(inode, Mode::Shared, &held).await)
        } else {
            None
        };
        match self.start_read(inode, ra, buf.len(), off) {
            Some(at) => self.read_rest(inode, at, buf, &held).await,
            None => Ok(0),
        }
    }

    /// The common read, answered whole: inside one page and inside the
    /// file, its page present and idle, no file lock configured. One
    /// lookup, no loop, nothing built; true if `buf` was filled. Anything
    /// else (a miss, a busy page, a copy that failed or raced a change
    /// of the slot, a read across pages or past EOF) returns false having
    /// changed nothing but bytes of `buf`, and the caller takes the
    /// general way, [`read_cached`](Self::read_cached), out of line,
    /// which copies them again: a miss looks its page up twice, against
    /// a device read.
    #[inline(always)]
    pub(crate) fn read_hit(&self, inode: &Inode, ra: &Readahead, buf: &mut [u8], off: u64) -> bool {
        let fs = &*self.fs;
        let in_page = (off % PAGE_SIZE_U64) as usize;
        // `len - 1 < PAGE_SIZE - in_page`: not empty, and inside the page.
        let len = buf.len();
        if fs.config.file_lock
            || len.wrapping_sub(1) >= PAGE_SIZE - in_page
            || off
                .checked_add(len as u64)
                .is_none_or(|end| end > inode.size())
        {
            return false;
        }
        let index = PageIndex::containing(off);
        let copied = fs
            .cache
            .try_read(fs.frames(), &inode.pages, inode.id, index, in_page, buf);
        if !matches!(copied, Some(Lookup::Hit)) {
            return false;
        }
        ra.on_hit(index.0, index.0 + 1, fs.config.readahead_pages);
        self.counters.add(Counter::cache_hits, 1);
        true
    }

    /// As much of a read as the cache can answer without waiting: the
    /// whole of it when every page is present and idle, which is how a
    /// synchronous caller reads cached data without building a future.
    pub(crate) fn read_cached(
        &self,
        inode: &Inode,
        ra: &Readahead,
        buf: &mut [u8],
        off: u64,
    ) -> Cached {
        if self.fs.config.file_lock {
            return Cached::Locked;
        }
        let Some(mut at) = self.start_read(inode, ra, buf.len(), off) else {
            return Cached::Done(Ok(0));
        };
        match self.copy_present(inode, &mut at, buf) {
            Ok(Stop::Done) => Cached::Done(Ok(at.done())),
            Ok(_) => Cached::Rest(at),
            Err(e) => Cached::Done(Err(e)),
        }
    }

    /// Where a read of `len` bytes at `off` stands before any copy, with
    /// the handle's readahead state updated; `None` if there is nothing
    /// to read (at or past EOF, or an empty buffer).
    #[inline]
    fn start_read(&self, inode: &Inode, ra: &Readahead, len: usize, off: u64) -> Option<ReadPos> {
        let size = inode.size();
        if off >= size || len == 0 {
            return None;
        }
        let end = off.saturating_add(len as u64).min(size);
        let (first, last) = ByteRange::new(off, end).pages();
        let window = ra.on_read(first.0, last.0, self.fs.config.readahead_pages);
        Some(ReadPos {
            off,
            pos: off,
            end,
            last: last.0,
            window,
            just_filled: u64::MAX,
        })
    }

    /// Copies pages from the cache into `buf` from `at` on, until the read
    /// is complete or a page is missing or busy.
    #[inline]
    fn copy_present(&self, inode: &Inode, at: &mut ReadPos, buf: &mut [u8]) -> Result<Stop> {
        let arena = self.fs.frames();
        while at.pos < at.end {
            let index = PageIndex::containing(at.pos);
            let in_page = (at.pos % PAGE_SIZE_U64) as usize;
            let n = (PAGE_SIZE - in_page).min((at.end - at.pos) as usize);
            let from = at.done();
            let dst = &mut buf[from..from + n];
            match self
                .fs
                .cache
                .read(arena, &inode.pages, inode.id, index, in_page, dst)
            {
                Lookup::Hit => {
                    if at.just_filled != index.0 {
                        self.counters.add(Counter::cache_hits, 1);
                    }
                    at.pos += n as u64;
                }
                Lookup::Busy(slot) => return Ok(Stop::Busy(slot)),
                Lookup::Failed(e) => return Err(e.into()),
                Lookup::Miss => return Ok(Stop::Miss(index)),
            }
        }
        Ok(Stop::Done)
    }

    /// Finishes a read from `at`: copies what is present, waits for busy
    /// pages and fills missing ones.
    pub(crate) async fn read_rest(
        &self,
        inode: &Inode,
        mut at: ReadPos,
        buf: &mut [u8],
        held: &Held,
    ) -> Result<usize> {
        loop {
            match self.copy_present(inode, &mut at, buf)? {
                Stop::Done => return Ok(at.done()),
                Stop::Busy(slot) => self.fs.cache.wait_idle(slot).await,
                Stop::Miss(index) => {
                    self.counters.add(Counter::cache_misses, 1);
                    let needed = at.last - index.0;
                    let count = needed.max(u64::from(at.window));
                    match self.fill(inode, index, count, needed, held).await? {
                        Fill::Present => at.just_filled = index.0,
                        Fill::Eof => {
                            // A truncate ran during this read: answer as if
                            // the read came after it, so the length matches
                            // a size the file had.
                            let now = inode.size();
                            return Ok((at.pos.min(now.max(at.off)) - at.off) as usize);
                        }
                    }
                }
            }
        }
    }

    /// Makes pages `[index, index + count)` present, as far as EOF: inserts
    /// every missing page first, then reads them with one command per
    /// device-contiguous run. Pages beyond the first `needed` count as
    /// readahead.
    pub(crate) async fn fill(
        &self,
        inode: &Inode,
        index: PageIndex,
        count: u64,
        needed: u64,
        held: &Held,
    ) -> Result<Fill> {
        let range = ByteRange::new(
            index.byte_offset(),
            index.0.saturating_add(count).saturating_mul(PAGE_SIZE_U64),
        );
        let _gate = self.lock(&inode.gate, range, Mode::Shared, held).await;
        loop {
            // Under the gate: truncate cannot shrink past these pages until
            // we leave, and the size we see now bounds what we may instantiate.
            let end = (index.0 + count).min(pages_for(inode.size()));
            if index.0 >= end {
                return Ok(Fill::Eof);
            }
            let mut new = Vec::new();
            let mut first_busy = None;
            for i in index.0..end {
                match self.fs.cache.insert(&inode.pages, inode.id, PageIndex(i)) {
                    Insert::New { slot, evicted } => {
                        if evicted {
                            self.counters.add(Counter::evictions, 1);
                        }
                        new.push((PageIndex(i), slot));
                    }
                    Insert::Existing(slot) if i == index.0 => first_busy = Some(slot),
                    Insert::Existing(_) => {}
                    Insert::Full => break,
                }
            }
            if new.is_empty() && first_busy.is_none() {
                self.make_room(1).await?;
                continue;
            }
            let result = self.load(inode, &new).await;
            for &(i, slot) in &new {
                self.fs
                    .cache
                    .finish_fill(&inode.pages, i, slot, result.is_ok(), false);
            }
            result?;
            let ahead = new.iter().filter(|(i, _)| i.0 >= index.0 + needed).count();
            self.counters.add(Counter::readahead_pages, ahead as u64);
            return Ok(Fill::Present);
        }
    }

    /// Fills the frames of freshly inserted (locked) pages: zeros for holes,
    /// device reads for mapped blocks, one command per run of pages that are
    /// consecutive in the file and on the device, up to the maximum transfer.
    /// Leaves the pages locked; the caller finishes them.
    pub(crate) async fn load(&self, inode: &Inode, pages: &[(PageIndex, u32)]) -> Result<()> {
        let arena = self.fs.frames();
        let max = self.fs.geometry.max_frames_per_command();
        let bpp = self.fs.geometry.blocks_per_page();
        // (first device block, frames)
        let mut runs: Vec<(u64, Vec<FrameId>)> = Vec::new();
        {
            let extents = inode.extents.read();
            let mut prev: Option<(u64, u64)> = None; // (page, block)
            for &(index, slot) in pages {
                match extents.lookup(index.0) {
                    None => {
                        arena.fill(FrameId(slot), 0, PAGE_SIZE, 0)?;
                        prev = None;
                    }
                    Some((block, _)) => {
                        self.fs.cache.mark_mapped(slot);
                        let extend = matches!(prev, Some((p, b)) if p + 1 == index.0 && b + 1 == block.0)
                            && runs.last().is_some_and(|(_, f)| f.len() < max);
                        match runs.last_mut() {
                            Some((_, frames)) if extend => frames.push(FrameId(slot)),
                            _ => runs.push((block.0, alloc::vec![FrameId(slot)])),
                        }
                        prev = Some((index.0, block.0));
                    }
                }
            }
        }
        let mut tags = Vec::with_capacity(runs.len());
        let mut first_err = None;
        for (block, frames) in &runs {
            let cmd = Command::Read {
                lba: Lba(block * bpp),
                frames,
            };
            match self.submit(&cmd).await {
                Ok(tag) => tags.push(tag),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        for tag in tags {
            if let Err(e) = self.wait(tag).await {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Called when no cache slot could be taken: every slot is dirty or
    /// held (being filled, under a device write, or pinned). Writes back
    /// dirty files so their pages can be evicted; if that leaves no room,
    /// waits for one held slot to be let go. Callers hold no cache page
    /// while they wait here, and an operation that holds pages lets them
    /// go without waiting for room, so the wait ends (the argument is in
    /// docs/design/engine.md, "Waiting for room"). A writeback error is returned:
    /// the cache is full of data the device refuses. `need` is how many
    /// slots the caller will take before it lets any go.
    pub(crate) async fn make_room(&self, need: usize) -> Result<()> {
        let cache = &self.fs.cache;
        if cache.dirty_pages() > 0 {
            let mut result = Ok(());
            for inode in self.fs.dirty_inodes().iter() {
                if result.is_ok() && !cache.has_room(need) {
                    result = self.writeback(inode, false).await.map(|_| ());
                }
            }
            result?;
        }
        match cache.busy_slot() {
            Some(slot) if !cache.has_room(need) => cache.wait_idle(slot).await,
            // Room appeared (or no slot is held): try again, after letting
            // other tasks run.
            _ => crate::sync::yield_now().await,
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Readahead;

    #[test]
    fn a_sequential_reader_grows_its_window_and_others_get_none() {
        let ra = Readahead::default();
        assert_eq!(ra.on_read(0, 1, 64), 8, "a first read at 0 is sequential");
        assert_eq!(ra.on_read(1, 2, 64), 16);
        assert_eq!(ra.on_read(1, 2, 64), 32, "again on the last page read");
        assert_eq!(ra.on_read(2, 3, 64), 64);
        assert_eq!(ra.on_read(3, 4, 64), 64, "capped");
        assert_eq!(ra.on_read(10, 11, 64), 0, "a jump");
        assert_eq!(ra.on_read(11, 12, 0), 0, "readahead off");
        assert_eq!(ra.on_read(0, 1, 64), 0, "backwards");
        assert_eq!(ra.on_read(1, 2, 2), 2, "a small maximum");
    }

    #[test]
    fn a_cached_read_records_only_a_sequential_run() {
        let ra = Readahead::default();
        assert_eq!(ra.on_read(0, 1, 64), 8);
        ra.on_hit(1, 2, 64);
        ra.on_hit(2, 3, 64);
        assert_eq!(ra.on_read(3, 4, 64), 64, "the hits grew the window");
        ra.on_hit(40, 41, 64);
        assert_eq!(ra.on_read(4, 5, 64), 64, "a random hit changed nothing");
        ra.on_hit(40, 41, 64);
        assert_eq!(ra.on_read(41, 42, 64), 0, "nor did it start a run");
    }
}
