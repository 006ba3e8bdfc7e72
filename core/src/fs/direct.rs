//! Direct I/O: reads and writes of whole pages that go to the device
//! instead of through the page cache (O_DIRECT's contract).
//!
//! Offsets and lengths must be multiples of the page size (4 KiB); the
//! caller's buffer may sit anywhere, because its bytes are copied through
//! frames the cache lends for the duration of the command (the one copy a
//! user-space buffer that is not DMA-mapped needs, as with SPDK's bounce
//! buffers).
//!
//! A direct write writes back any dirty page of its range, drops the
//! range's cached pages under the invalidate gate (so no reader brings one
//! back from a block being rewritten), writes the data to the blocks it
//! maps, gives holes new blocks and maps them only once their data is on
//! the device: no reader, and no commit, ever sees a block before its
//! data. A file used only through direct I/O never enters the cache.
//!
//! A direct read copies a page the cache holds from the cache (it is as
//! new as the device's copy or newer), and reads the others from the
//! device. The extent map is looked at before the cache: a block mapped
//! then whose page is not cached afterwards has its data on the device,
//! because a page gets a block only while cached and leaves the cache only
//! once its data is written.

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::inode::Inode;
use super::write::Copy;
use super::{Session, MAX_FILE_SIZE};
use crate::cache::Lookup;
use crate::dev::{BlockDevice, Command, DevError, FrameArena};
use crate::error::{RangeError, Result, SpaceError};
use crate::lock::{Held, Mode};
use crate::stats::Counter;
use crate::units::{BlockNo, ByteRange, FrameId, Lba, PageIndex, PAGE_SIZE, PAGE_SIZE_U64};

/// Where one page of a direct read comes from.
#[derive(Clone, Copy)]
enum Source {
    /// Copied from the cache already.
    Cached,
    /// A hole: zeros.
    Hole,
    /// This device block.
    Device(u64),
}

/// A run of device blocks and the buffer pages it carries.
struct Run {
    block: u64,
    /// Indices of the chunk's pages, consecutive.
    pages: core::ops::Range<usize>,
}

/// Checks that `[off, off + len)` is page-aligned and inside the largest
/// file; returns it as a range.
fn aligned(off: u64, len: usize) -> Result<ByteRange> {
    let range = ByteRange::at(off, len as u64).ok_or(RangeError::Overflow)?;
    if off % PAGE_SIZE_U64 != 0 || len % PAGE_SIZE != 0 {
        return Err(RangeError::Unaligned.into());
    }
    if range.end > MAX_FILE_SIZE {
        return Err(RangeError::TooLarge.into());
    }
    Ok(range)
}

/// Groups `blocks` (one per page; `None` skips the page) into runs of
/// consecutive device blocks of at most `max` pages.
fn runs(blocks: impl Iterator<Item = Option<u64>>, max: usize) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for (i, b) in blocks.enumerate() {
        let Some(b) = b else { continue };
        match out.last_mut() {
            Some(r)
                if r.pages.end == i
                    && r.block + r.pages.len() as u64 == b
                    && r.pages.len() < max =>
            {
                r.pages.end = i + 1
            }
            _ => out.push(Run {
                block: b,
                pages: i..i + 1,
            }),
        }
    }
    out
}

impl<D: BlockDevice> Session<D> {
    /// Pages per chunk of a direct transfer: the frames it borrows at once.
    fn direct_chunk(&self) -> usize {
        let max = self.fs.geometry.max_frames_per_command();
        let cache = self.fs.cache.capacity() as usize;
        (max * 4).min(cache / 4).max(1)
    }

    /// Borrows `n` frames from the cache, waiting for room with none held.
    async fn borrow_frames(&self, n: usize) -> Result<Vec<u32>> {
        loop {
            if let Some(slots) = self.fs.cache.borrow(n) {
                return Ok(slots);
            }
            self.make_room(n).await?;
        }
    }

    /// Runs `runs` (reads or writes through `frames`, one frame per page of
    /// the chunk), all in flight at once; the first error, if any.
    async fn direct_commands(&self, runs: &[Run], frames: &[u32], write: bool) -> Result<()> {
        let bpp = self.fs.geometry.blocks_per_page();
        let mut tags = Vec::with_capacity(runs.len());
        let mut first_err: Option<DevError> = None;
        for run in runs {
            let ids: Vec<FrameId> = frames[run.pages.clone()]
                .iter()
                .map(|&s| FrameId(s))
                .collect();
            let lba = Lba(run.block * bpp);
            let cmd = if write {
                Command::Write {
                    lba,
                    frames: &ids,
                    fua: false,
                }
            } else {
                Command::Read { lba, frames: &ids }
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
        let pages: usize = runs.iter().map(|r| r.pages.len()).sum();
        self.counters.add(Counter::direct_pages, pages as u64);
        if write {
            // Even a failed write may have reached some blocks.
            self.fs.unflushed.fetch_add(1, Ordering::AcqRel);
            self.fs.volatile.note();
        }
        match first_err {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Reads `buf` from `off` past the cache (see the module notes).
    /// Returns the bytes read: fewer at EOF, 0 at or past it.
    pub(crate) async fn read_direct_inode(
        &self,
        inode: &Inode,
        buf: &mut [u8],
        off: u64,
    ) -> Result<usize> {
        let range = aligned(off, buf.len())?;
        if range.is_empty() {
            return Ok(0);
        }
        let held = Held::new();
        // Truncate and punch-hole cannot free the range's blocks, and no
        // direct write rewrites them, while this is held.
        let _gate = self.lock(&inode.gate, range, Mode::Shared, &held).await;
        let size = inode.size();
        if off >= size {
            return Ok(0);
        }
        let end = range.end.min(size);
        let chunk = self.direct_chunk();
        let mut pos = off;
        while pos < end {
            let first = pos / PAGE_SIZE_U64;
            let pages = (end.div_ceil(PAGE_SIZE_U64) - first).min(chunk as u64) as usize;
            let at = (pos - off) as usize;
            let bytes = ((end - pos) as usize).min(pages * PAGE_SIZE);
            self.read_direct_chunk(inode, &mut buf[at..at + bytes], first)
                .await?;
            pos += bytes as u64;
        }
        Ok((end - off) as usize)
    }

    /// Fills `buf` (at most one chunk, starting at page `first`; its last
    /// page may be partial, at EOF).
    async fn read_direct_chunk(&self, inode: &Inode, buf: &mut [u8], first: u64) -> Result<()> {
        let n = buf.len().div_ceil(PAGE_SIZE);
        // The map first, then the cache (see the module notes).
        let mapped: Vec<Option<u64>> = {
            let extents = inode.extents.read();
            (0..n as u64)
                .map(|i| extents.lookup(first + i).map(|(b, _)| b.0))
                .collect()
        };
        let arena = self.fs.frames();
        let mut sources = Vec::with_capacity(n);
        for (i, (block, page)) in mapped.iter().zip(buf.chunks_mut(PAGE_SIZE)).enumerate() {
            let index = PageIndex(first + i as u64);
            let source = loop {
                match self
                    .fs
                    .cache
                    .read(arena, &inode.pages, inode.id, index, 0, page)
                {
                    Lookup::Hit => break Source::Cached,
                    Lookup::Busy(slot) => self.fs.cache.wait_idle(slot).await,
                    Lookup::Failed(e) => return Err(e.into()),
                    Lookup::Miss => break block.map_or(Source::Hole, Source::Device),
                }
            };
            if let Source::Hole = source {
                page.fill(0);
            }
            sources.push(source);
        }
        let device = sources.iter().map(|s| match s {
            Source::Device(b) => Some(*b),
            _ => None,
        });
        let runs = runs(device, self.fs.geometry.max_frames_per_command());
        if runs.is_empty() {
            return Ok(());
        }
        let frames = self.borrow_frames(n).await?;
        let read = self.direct_commands(&runs, &frames, false).await;
        let copied = read.and_then(|()| {
            for (i, page) in buf.chunks_mut(PAGE_SIZE).enumerate() {
                if let Source::Device(_) = sources[i] {
                    arena.read(FrameId(frames[i]), 0, page)?;
                }
            }
            Ok(())
        });
        self.fs.cache.give_back(&frames);
        copied
    }

    /// Writes `buf` at `off` past the cache (see the module notes),
    /// extending the file if it ends past EOF. Returns the bytes written:
    /// all, or fewer if the device filled up or failed after some chunks
    /// were written, or an error if none was. What a failed chunk left in
    /// its range is unspecified, as with O_DIRECT; its holes stay holes.
    /// If the device is full while freed blocks wait for a commit, commits
    /// and tries again.
    pub(crate) async fn write_direct_inode(
        &self,
        inode: &Inode,
        buf: &[u8],
        off: u64,
    ) -> Result<usize> {
        let range = aligned(off, buf.len())?;
        if range.is_empty() {
            return Ok(0);
        }
        let written = self
            .with_room(|| self.write_outline(inode, range, Copy::Direct(buf)))
            .await;
        if written.is_ok() {
            inode.touch_data((self.fs.config.wall_clock)());
        }
        written
    }

    /// The write itself, with truncate and punch-hole kept out by the
    /// caller; chunk by chunk, stopping at the first that fails.
    pub(super) async fn write_direct_locked(
        &self,
        inode: &Inode,
        buf: &[u8],
        range: ByteRange,
        held: &Held,
    ) -> Result<usize> {
        let _gate = self.lock(&inode.gate, range, Mode::Exclusive, held).await;
        let _extent = self
            .lock_striped(inode.extent_lock(), range, Mode::Exclusive, held)
            .await;
        let (first, last) = range.pages();
        let mut dirty = false;
        self.fs
            .cache
            .scan(&inode.pages, inode.id, first, last, |_, _, d| dirty |= d);
        if dirty {
            // What the cache holds of the range must not reach the device
            // after these bytes do.
            self.writeback(inode, false).await?;
        }
        self.drop_pages(inode, first.0, last.0).await;
        let chunk = self.direct_chunk();
        let mut page = first.0;
        while page < last.0 {
            let n = ((last.0 - page) as usize).min(chunk);
            let at = ((page - first.0) as usize) * PAGE_SIZE;
            let r = self
                .write_direct_chunk(inode, &buf[at..at + n * PAGE_SIZE], page)
                .await;
            match r {
                Ok(()) => page += n as u64,
                Err(e) if page == first.0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(((page - first.0) as usize) * PAGE_SIZE)
    }

    /// Writes one chunk of whole pages from page `first`: mapped pages in
    /// place, holes into new blocks mapped once written.
    async fn write_direct_chunk(&self, inode: &Inode, buf: &[u8], first: u64) -> Result<()> {
        let n = buf.len() / PAGE_SIZE;
        let mut blocks: Vec<u64> = Vec::with_capacity(n);
        let mut fresh: Vec<(u64, u64)> = Vec::new(); // (file page, block)
        {
            let extents = inode.extents.read();
            let mut hint = first
                .checked_sub(1)
                .and_then(|p| extents.lookup(p))
                .map_or(0, |(b, _)| b.0 + 1);
            for i in 0..n as u64 {
                let b = match extents.lookup(first + i) {
                    Some((b, _)) => b.0,
                    None => match self.fs.alloc_data(BlockNo(hint)) {
                        Some(b) => {
                            fresh.push((first + i, b.0));
                            b.0
                        }
                        None => {
                            self.unalloc(&fresh);
                            return Err(SpaceError::DeviceFull.into());
                        }
                    },
                };
                blocks.push(b);
                hint = b + 1;
            }
        }
        let frames = match self.borrow_frames(n).await {
            Ok(f) => f,
            Err(e) => {
                self.unalloc(&fresh);
                return Err(e);
            }
        };
        let arena = self.fs.frames();
        let staged = frames.iter().enumerate().try_for_each(|(i, &s)| {
            arena.write(FrameId(s), 0, &buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE])
        });
        let runs = runs(
            blocks.iter().map(|&b| Some(b)),
            self.fs.geometry.max_frames_per_command(),
        );
        let written = match staged {
            Ok(()) => self.direct_commands(&runs, &frames, true).await,
            Err(e) => Err(e.into()),
        };
        self.fs.cache.give_back(&frames);
        if let Err(e) = written {
            self.unalloc(&fresh);
            return Err(e);
        }
        if !fresh.is_empty() {
            let mut extents = inode.extents.write();
            for &(page, block) in &fresh {
                extents.insert(page, BlockNo(block), 1);
            }
            self.fs.meta_len_changed(inode, extents.len(), false);
            inode.meta_changed();
        }
        Ok(())
    }

    /// Returns blocks given to holes of a direct write that never mapped
    /// them (nothing references them, durable or not).
    fn unalloc(&self, fresh: &[(u64, u64)]) {
        let mut space = self.fs.space.lock();
        for &(_, b) in fresh {
            // A failure means the maps disagree; the invariant checker
            // reports it.
            let _ = space.free(BlockNo(b), 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn runs_split_at_gaps_holes_and_the_maximum() {
        let blocks = [
            Some(10),
            Some(11),
            None,
            Some(12),
            Some(13),
            Some(14),
            Some(20),
        ];
        let r = runs(blocks.iter().copied(), 2);
        let got: Vec<(u64, core::ops::Range<usize>)> =
            r.iter().map(|r| (r.block, r.pages.clone())).collect();
        assert_eq!(got, [(10, 0..2), (12, 3..5), (14, 5..6), (20, 6..7)]);
    }

    #[test]
    fn alignment_is_checked() {
        assert!(aligned(0, 4096).is_ok());
        assert!(aligned(4096, 0).is_ok());
        for (off, len) in [(1, 4096), (0, 4095), (4096, 512)] {
            assert_eq!(
                aligned(off, len).unwrap_err(),
                Error::Range(RangeError::Unaligned)
            );
        }
        assert_eq!(
            aligned(MAX_FILE_SIZE, 4096).unwrap_err(),
            Error::Range(RangeError::TooLarge)
        );
    }
}
