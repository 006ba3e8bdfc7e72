//! DMA memory for the emulated controller: an IOVA space of regions shared
//! by the driver (through [`DmaRegion`]) and the device (through bus
//! addresses).
//!
//! A region is plain bytes in 4 KiB pages, each behind its own lock
//! ([`LockedPages`]: one contiguous allocation, laid out as a VFIO arena
//! is), so "CPU" and "device" accesses are well defined, each access is
//! atomic within its page (a completion entry is never seen half-written),
//! and bulk copies run at memcpy speed. (Atomic words, the other choice
//! without unsafe code, copy four times slower, and every cached read and
//! write of the page cache goes through this memory.)
//!
//! An address space made with [`EmuMemory::with_split_reads`] keeps its
//! regions as atomic words instead, read and written by the same code as
//! VFIO memory ([`WordView`]): the driver then runs exactly the memory path
//! it runs on a real controller, with no page lock in it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use spin::RwLock;

use super::pages::{LockedPages, PAGE as PAGE_BYTES};
use crate::pcie::hal::{DmaAllocator, DmaError, DmaRegion, Iova};
use crate::pcie::words::WordView;

const PAGE: u64 = PAGE_BYTES as u64;
/// First bus address handed out; zero stays unmapped so a null PRP faults.
const IOVA_BASE: u64 = 0x1_0000_0000;

/// Bytes in 4 KiB pages, one lock per page; or, as VFIO memory is
/// accessed, atomic words.
#[derive(Debug)]
pub struct DmaBytes {
    pages: LockedPages,
    /// Non-empty (and `pages` empty) for memory kept as atomic words.
    words: Box<[AtomicU64]>,
    len: usize,
}

impl DmaBytes {
    /// `len` zeroed bytes.
    pub fn new(len: usize) -> Result<DmaBytes, DmaError> {
        Ok(DmaBytes {
            pages: LockedPages::new(len.div_ceil(PAGE_BYTES))?,
            words: Box::default(),
            len,
        })
    }
    /// `len` zeroed bytes kept as atomic words and accessed through
    /// [`WordView`], as VFIO memory is: no access is atomic beyond a word.
    pub fn words(len: usize) -> DmaBytes {
        let words = (0..len.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        DmaBytes {
            pages: LockedPages::empty(),
            words,
            len,
        }
    }
    /// The word view, for memory kept as words.
    #[inline(always)]
    fn view(&self) -> Option<WordView<'_>> {
        (!self.words.is_empty()).then(|| WordView::new(&self.words, self.len))
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    fn check(&self, offset: usize, n: usize) -> Result<(), DmaError> {
        crate::pcie::hal::check_span(offset, n, self.len)
    }
    /// Calls `f(page index, range in page, range in the caller's buffer)`
    /// for each page `[offset, offset + n)` touches; `f` returns `None` for
    /// a page that does not exist.
    #[inline]
    fn each(
        &self,
        offset: usize,
        n: usize,
        mut f: impl FnMut(usize, core::ops::Range<usize>, core::ops::Range<usize>) -> Option<()>,
    ) -> Result<(), DmaError> {
        self.check(offset, n)?;
        let mut done = 0;
        while done < n {
            let pos = offset + done;
            let (p, at) = (pos / PAGE_BYTES, pos % PAGE_BYTES);
            let k = (PAGE_BYTES - at).min(n - done);
            f(p, at..at + k, done..done + k).ok_or(DmaError::OutOfBounds)?;
            done += k;
        }
        Ok(())
    }
    /// The index of the page holding all of `[offset, offset + n)` and
    /// where the span starts in it, if the span is checked and lies in one
    /// page (every queue entry): the copy then skips the page walk.
    #[inline(always)]
    fn one_page(&self, offset: usize, n: usize) -> Option<(usize, usize)> {
        let at = offset % PAGE_BYTES;
        if at + n > PAGE_BYTES || self.check(offset, n).is_err() {
            return None;
        }
        Some((offset / PAGE_BYTES, at))
    }
    /// Copies bytes out. A span within one page (a queue entry, a frame)
    /// is copied inline (always: the driver's queue-entry accesses must
    /// see the entry's fixed size to become a few moves), so a fixed-size entry's copy is a few moves; a
    /// span across pages takes the page walk out of line.
    #[inline(always)]
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        if let Some(view) = self.view() {
            return view.read(offset, dst);
        }
        if let Some((p, at)) = self.one_page(offset, dst.len()) {
            let page = self.pages.read(p).ok_or(DmaError::OutOfBounds)?;
            dst.copy_from_slice(&page[at..at + dst.len()]);
            return Ok(());
        }
        self.read_pages(offset, dst)
    }
    /// Copies bytes out of 4 KiB page `page` from byte `at`
    /// ([`DmaRegion::read_page`]): the page found by its index, the span
    /// checked against the page only (a caller that checked it already
    /// lets the inlined check fold away). Regions are whole pages (the
    /// allocator rounds their length up), so a page that exists lies
    /// inside the region.
    #[inline(always)]
    pub fn read_page(&self, page: usize, at: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        if self.view().is_some() {
            return self.read(crate::pcie::hal::page_offset(page, at, dst.len())?, dst);
        }
        self.read_locked_page(page, at, dst)
    }
    /// [`read_page`](Self::read_page) of memory kept in pages, for a caller
    /// that knows it is (memory kept as words has no pages: every page is
    /// out of bounds).
    #[inline(always)]
    fn read_locked_page(&self, page: usize, at: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        let end = at.checked_add(dst.len()).ok_or(DmaError::OutOfBounds)?;
        let bytes = self.pages.read(page).ok_or(DmaError::OutOfBounds)?;
        crate::pcie::page_copy::copy(dst, bytes.get(at..end).ok_or(DmaError::OutOfBounds)?);
        Ok(())
    }
    /// Copies bytes into 4 KiB page `page` at byte `at`, as
    /// [`read_page`](Self::read_page).
    #[inline(always)]
    pub fn write_page(&self, page: usize, at: usize, src: &[u8]) -> Result<(), DmaError> {
        if self.view().is_some() {
            return self.write(crate::pcie::hal::page_offset(page, at, src.len())?, src);
        }
        self.write_locked_page(page, at, src)
    }
    /// [`write_page`](Self::write_page) of memory kept in pages, as
    /// [`read_locked_page`](Self::read_locked_page).
    #[inline(always)]
    fn write_locked_page(&self, page: usize, at: usize, src: &[u8]) -> Result<(), DmaError> {
        let end = at.checked_add(src.len()).ok_or(DmaError::OutOfBounds)?;
        let mut bytes = self.pages.write(page).ok_or(DmaError::OutOfBounds)?;
        let dst = bytes.get_mut(at..end).ok_or(DmaError::OutOfBounds)?;
        crate::pcie::page_copy::copy(dst, src);
        Ok(())
    }
    /// Reads a little-endian `u32` (memory kept as words: one load).
    #[inline(always)]
    pub fn read_u32(&self, offset: usize) -> Result<u32, DmaError> {
        if let Some(view) = self.view() {
            return view.read_u32(offset);
        }
        let mut b = [0u8; 4];
        self.read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    #[inline(never)]
    fn read_pages(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        self.each(offset, dst.len(), |p, src, out| {
            dst[out].copy_from_slice(&self.pages.read(p)?[src]);
            Some(())
        })
    }
    /// Copies bytes in; as [`read`](Self::read), a span within one page
    /// inline.
    #[inline(always)]
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        if let Some(view) = self.view() {
            return view.write(offset, src);
        }
        if let Some((p, at)) = self.one_page(offset, src.len()) {
            let mut page = self.pages.write(p).ok_or(DmaError::OutOfBounds)?;
            page[at..at + src.len()].copy_from_slice(src);
            return Ok(());
        }
        self.write_pages(offset, src)
    }
    /// Writes little-endian `u32`s. Memory kept as words stores them
    /// straight from the dwords, as VFIO memory does; page memory copies
    /// their bytes in under the page lock, as [`write`](Self::write).
    #[inline(always)]
    pub fn write_u32s(&self, offset: usize, src: &[u32]) -> Result<(), DmaError> {
        if let Some(view) = self.view() {
            return view.write_u32s(offset, src);
        }
        if let (Ok(dws), Some((p, at))) = (<&[u32; 16]>::try_from(src), self.one_page(offset, 64)) {
            // A submission entry: copied under the page lock straight from
            // its dwords, with no byte copy of it built first.
            let mut page = self.pages.write(p).ok_or(DmaError::OutOfBounds)?;
            return page.put_u32s(at, dws).ok_or(DmaError::OutOfBounds);
        }
        self.check(offset, src.len().saturating_mul(4))?;
        for (i, &v) in src.iter().enumerate() {
            self.write(offset + i * 4, &v.to_le_bytes())?;
        }
        Ok(())
    }
    #[inline(never)]
    fn write_pages(&self, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        self.each(offset, src.len(), |p, dst, input| {
            self.pages.write(p)?[dst].copy_from_slice(&src[input]);
            Some(())
        })
    }
    /// Sets a run of bytes.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), DmaError> {
        if let Some(view) = self.view() {
            return view.fill(offset, len, byte);
        }
        self.each(offset, len, |p, dst, _| {
            self.pages.write(p)?[dst].fill(byte);
            Some(())
        })
    }
}

#[derive(Debug, Default)]
struct Space {
    regions: RwLock<BTreeMap<u64, Arc<DmaBytes>>>,
    next: AtomicU64,
    /// Regions are atomic words and do not claim
    /// [`DmaRegion::page_atomic`].
    split: bool,
}

/// The emulated bus: allocates regions and resolves bus addresses for the
/// device. Clones share one address space.
#[derive(Clone, Debug)]
pub struct EmuMemory {
    space: Arc<Space>,
}

impl Default for EmuMemory {
    fn default() -> Self {
        EmuMemory::new()
    }
}

impl EmuMemory {
    /// An empty address space.
    pub fn new() -> EmuMemory {
        EmuMemory::with(false)
    }
    /// An empty address space whose regions are atomic words read and
    /// written through [`WordView`], as VFIO memory is, and so do not
    /// claim to be [page-atomic](DmaRegion::page_atomic): the driver then
    /// reads a completion's status dword first and the entry after, as it
    /// does on a real controller (`vm/io-cost.sh 100000 1 emu-split`
    /// counts that path).
    pub fn with_split_reads() -> EmuMemory {
        EmuMemory::with(true)
    }
    fn with(split: bool) -> EmuMemory {
        EmuMemory {
            space: Arc::new(Space {
                regions: RwLock::new(BTreeMap::new()),
                next: AtomicU64::new(IOVA_BASE),
                split,
            }),
        }
    }
    /// The region holding `[iova, iova + len)` and the offset into it; an
    /// access that is unmapped or crosses a region end fails.
    fn resolve(&self, iova: u64, len: usize) -> Result<(Arc<DmaBytes>, usize), DmaError> {
        let map = self.space.regions.read();
        let (&base, mem) = map
            .range(..=iova)
            .next_back()
            .ok_or(DmaError::OutOfBounds)?;
        let off = usize::try_from(iova - base).map_err(|_| DmaError::OutOfBounds)?;
        mem.check(off, len)?;
        Ok((mem.clone(), off))
    }
    /// Device-side read at a bus address.
    pub fn read(&self, iova: u64, dst: &mut [u8]) -> Result<(), DmaError> {
        let (mem, off) = self.resolve(iova, dst.len())?;
        mem.read(off, dst)
    }
    /// Device-side write at a bus address.
    pub fn write(&self, iova: u64, src: &[u8]) -> Result<(), DmaError> {
        let (mem, off) = self.resolve(iova, src.len())?;
        mem.write(off, src)
    }
    /// Device-side fill at a bus address.
    pub fn fill(&self, iova: u64, len: usize, byte: u8) -> Result<(), DmaError> {
        let (mem, off) = self.resolve(iova, len)?;
        mem.fill(off, len, byte)
    }
    /// Device-side little-endian `u64` read.
    pub fn read_u64(&self, iova: u64) -> Result<u64, DmaError> {
        let mut b = [0u8; 8];
        self.read(iova, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    /// Number of mapped regions (for leak checks in tests).
    pub fn regions(&self) -> usize {
        self.space.regions.read().len()
    }
}

/// A region of [`EmuMemory`]; dropping it unmaps it.
#[derive(Debug)]
pub struct EmuRegion {
    mem: Arc<DmaBytes>,
    iova: u64,
    space: Weak<Space>,
    split: bool,
}

impl Drop for EmuRegion {
    fn drop(&mut self) {
        if let Some(space) = self.space.upgrade() {
            space.regions.write().remove(&self.iova);
        }
    }
}

impl DmaRegion for EmuRegion {
    fn len(&self) -> usize {
        self.mem.len()
    }
    fn iova(&self) -> Iova {
        Iova(self.iova)
    }
    fn page_atomic(&self) -> bool {
        // Each page is behind its own lock (unless the space keeps words,
        // as VFIO memory).
        !self.split
    }
    #[inline(always)]
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        self.mem.read(offset, dst)
    }
    // The frames branch on `page_atomic` (this region's `split`) just
    // before a page copy; branching on the same field here lets the
    // compiler fold the two checks into one.
    #[inline(always)]
    fn read_page(&self, page: usize, at: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        if self.split {
            return self.mem.read_page(page, at, dst);
        }
        self.mem.read_locked_page(page, at, dst)
    }
    #[inline(always)]
    fn write_page(&self, page: usize, at: usize, src: &[u8]) -> Result<(), DmaError> {
        if self.split {
            return self.mem.write_page(page, at, src);
        }
        self.mem.write_locked_page(page, at, src)
    }
    #[inline(always)]
    fn read_u32(&self, offset: usize) -> Result<u32, DmaError> {
        self.mem.read_u32(offset)
    }
    #[inline(always)]
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        self.mem.write(offset, src)
    }
    #[inline(always)]
    fn write_u32s(&self, offset: usize, src: &[u32]) -> Result<(), DmaError> {
        self.mem.write_u32s(offset, src)
    }
    fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), DmaError> {
        self.mem.fill(offset, len, byte)
    }
}

impl DmaAllocator for EmuMemory {
    type Region = EmuRegion;
    fn alloc(&self, len: usize) -> Result<EmuRegion, DmaError> {
        let len = len
            .max(1)
            .checked_next_multiple_of(PAGE as usize)
            .ok_or(DmaError::NoMemory)?;
        // One unmapped guard page after each region, so an overrun by the
        // device faults instead of landing in a neighbour.
        let span = len as u64 + PAGE;
        let iova = self.space.next.fetch_add(span, Ordering::Relaxed);
        if iova.checked_add(span).is_none() {
            return Err(DmaError::NoMemory);
        }
        let mem = Arc::new(if self.space.split {
            DmaBytes::words(len)
        } else {
            DmaBytes::new(len)?
        });
        self.space.regions.write().insert(iova, mem.clone());
        Ok(EmuRegion {
            mem,
            iova,
            space: Arc::downgrade(&self.space),
            split: self.space.split,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_addresses_resolve_and_unmap() {
        let bus = EmuMemory::new();
        let r = bus.alloc(10).unwrap();
        assert_eq!(r.len(), 4096);
        assert_eq!(r.iova().0 % 4096, 0);
        r.write_u64(8, 0x1122_3344_5566_7788).unwrap();
        assert_eq!(bus.read_u64(r.iova().0 + 8).unwrap(), 0x1122_3344_5566_7788);
        assert!(
            bus.read_u64(r.iova().0 + 4092).is_err(),
            "crosses the region end"
        );
        assert!(bus.read_u64(0).is_err());
        let iova = r.iova().0;
        drop(r);
        assert_eq!(bus.regions(), 0);
        assert!(bus.read_u64(iova).is_err());
    }

    #[test]
    fn page_copies_stay_inside_their_page_and_the_region() {
        for bus in [EmuMemory::new(), EmuMemory::with_split_reads()] {
            let r = bus.alloc(2 * 4096).unwrap();
            r.write_page(1, 4000, &[7u8; 96]).unwrap();
            let mut back = [0u8; 100];
            r.read_page(1, 3996, &mut back).unwrap();
            assert_eq!(back[..4], [0; 4]);
            assert!(back[4..].iter().all(|&b| b == 7));
            assert_eq!(r.read(4096 + 4000, &mut back[..96]), Ok(()));
            let mut one = [0u8; 1];
            assert_eq!(r.read_page(1, 4096, &mut one), Err(DmaError::OutOfBounds));
            assert_eq!(r.read_page(2, 0, &mut one), Err(DmaError::OutOfBounds));
            assert_eq!(
                r.write_page(0, 4090, &[1u8; 7]),
                Err(DmaError::OutOfBounds),
                "crosses into the next page"
            );
            assert_eq!(
                r.write_page(usize::MAX, 0, &one),
                Err(DmaError::OutOfBounds)
            );
            r.read_page(0, 0, &mut back).unwrap();
            assert_eq!(back, [0u8; 100], "nothing landed in page 0");
        }
    }

    #[test]
    fn memory_kept_as_words_reads_as_vfio_memory() {
        let bus = EmuMemory::with_split_reads();
        let r = bus.alloc(3 * 4096).unwrap();
        assert!(!r.page_atomic());
        let src: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        // Across a page boundary and off word alignment.
        r.write(4000, &src[..4100]).unwrap();
        let mut back = vec![0u8; 4100];
        bus.read(r.iova().0 + 4000, &mut back).unwrap();
        assert_eq!(back, src[..4100]);
        assert_eq!(r.read_u32(4000).unwrap(), u32::from_le_bytes([0, 1, 2, 3]));
        bus.fill(r.iova().0 + 8, 9, 0xee).unwrap();
        let mut b = [0u8; 2];
        r.read(16, &mut b).unwrap();
        assert_eq!(b, [0xee, 0]);
        assert!(r.read(3 * 4096 - 4, &mut [0u8; 8]).is_err());
        assert!(EmuMemory::new().alloc(1).unwrap().page_atomic());
    }

    #[test]
    fn dwords_land_as_bytes_in_both_kinds_of_memory() {
        for bus in [EmuMemory::new(), EmuMemory::with_split_reads()] {
            let r = bus.alloc(2 * 4096).unwrap();
            let dws = [0x0403_0201u32, 0x0807_0605];
            // Within a page, and across the page boundary.
            for off in [8, 4092] {
                r.write_u32s(off, &dws).unwrap();
                let mut b = [0u8; 8];
                r.read(off, &mut b).unwrap();
                assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8]);
            }
            assert!(r.write_u32s(2 * 4096 - 4, &dws).is_err());
            // A submission entry's 16 dwords, within a page and across the
            // boundary.
            let entry: [u32; 16] = core::array::from_fn(|i| 0x0101_0101 * (i as u32 + 1));
            for off in [64, 4096 - 32] {
                r.write_u32s(off, &entry).unwrap();
                let mut b = [0u8; 64];
                r.read(off, &mut b).unwrap();
                assert!(b.iter().enumerate().all(|(i, &x)| x == (i / 4 + 1) as u8));
            }
            assert!(r.write_u32s(2 * 4096 - 32, &entry).is_err());
        }
    }
}
