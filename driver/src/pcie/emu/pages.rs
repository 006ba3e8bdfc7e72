//! The emulated controller's DMA memory as a real arena is laid out: one
//! contiguous, page-aligned allocation (2 MiB-aligned and, on Linux,
//! advised for transparent huge pages once it spans one), each 4 KiB page
//! behind its own lock in a separate dense array. The one leaf module of
//! the emulated controller with unsafe code; [`super::memory`] builds the
//! bus on top of it in safe code.
//!
//! A VFIO arena is one huge-page mapping, so a page-cache copy out of it
//! costs one TLB entry per 2 MiB and reads a 64-byte aligned source. The
//! emulated memory had a heap allocation per page, each with its lock
//! beside the pointer to its bytes: scattered pages, one 4 KiB TLB entry
//! (often two: the pages were not page-aligned) per copy, a copy source
//! off 64-byte alignment for three pages in four, and one more dependent
//! load (the pointer) before the copy could start.
//!
//! Soundness rests on one rule: a page's bytes are reached only through
//! [`PageRead`] (its lock held shared) or [`PageWrite`] (held exclusive),
//! so no access ever races another.
//!
//! The page lock is one word ([`PageLock`]) rather than a general
//! reader-writer lock: the driver takes it on each of its three queue
//! accesses per I/O, so its uncontended path is one atomic operation to
//! take it and one to give it back, with no other check (spin's `RwLock`
//! added a reader-overflow check and an upgrade bit).
#![allow(unsafe_code)]

use core::hint::spin_loop;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::alloc::{self, Layout};

use crate::pcie::hal::DmaError;

/// Bytes in one page (the lock's grain).
pub const PAGE: usize = 4096;
/// A huge page: the alignment (and length grain) of an arena that spans
/// one.
const HUGE: usize = 2 << 20;

/// `len` bytes in whole pages, zeroed, contiguous, each page behind its
/// own lock.
pub struct LockedPages {
    ptr: NonNull<u8>,
    /// The allocation (`None` for no pages).
    layout: Option<Layout>,
    locks: Box<[PageLock]>,
}

/// A page's lock: the number of readers holding it, or [`PageLock::WRITER`]
/// while a writer does. A writer waits for the readers to leave and
/// readers for the writer (spinning: every hold is one copy of at most a
/// page).
#[derive(Default)]
struct PageLock(AtomicUsize);

impl PageLock {
    /// The value while a writer holds the lock (readers that find it undo
    /// their increment, so the count below it never reaches it).
    const WRITER: usize = 1 << (usize::BITS - 1);

    /// Takes the lock shared: while a writer holds it, undoes this
    /// reader's increment and waits for the writer to leave. (The wait is
    /// a loop here, not a call: a call on the fast path, even one never
    /// taken, makes every copy under the lock keep its arguments in
    /// saved registers.)
    #[inline(always)]
    fn read(&self) -> PageReadLock<'_> {
        while self.0.fetch_add(1, Ordering::Acquire) & Self::WRITER != 0 {
            self.0.fetch_sub(1, Ordering::Relaxed);
            while self.0.load(Ordering::Relaxed) & Self::WRITER != 0 {
                spin_loop();
            }
        }
        PageReadLock(self)
    }

    /// Takes the lock exclusive, waiting until nobody holds it.
    #[inline(always)]
    fn write(&self) -> PageWriteLock<'_> {
        while self
            .0
            .compare_exchange_weak(0, Self::WRITER, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.0.load(Ordering::Relaxed) != 0 {
                spin_loop();
            }
        }
        PageWriteLock(self)
    }
}

/// A page's lock held shared; dropping it gives it back.
struct PageReadLock<'a>(&'a PageLock);

impl Drop for PageReadLock<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        (self.0).0.fetch_sub(1, Ordering::Release);
    }
}

/// A page's lock held exclusive; dropping it gives it back.
struct PageWriteLock<'a>(&'a PageLock);

impl Drop for PageWriteLock<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // Not a store of zero: a reader that found the writer may have
        // its increment in the count, still to be undone.
        (self.0).0.fetch_sub(PageLock::WRITER, Ordering::Release);
    }
}

// SAFETY: the allocation is owned by this value, and every access to it
// goes through a page guard that holds the page's lock (shared to read,
// exclusive to write), so sharing and sending the arena between threads
// races no access.
unsafe impl Send for LockedPages {}
// SAFETY: as above.
unsafe impl Sync for LockedPages {}

impl core::fmt::Debug for LockedPages {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LockedPages")
            .field("pages", &self.locks.len())
            .finish()
    }
}

impl LockedPages {
    /// No pages.
    pub fn empty() -> LockedPages {
        LockedPages {
            ptr: NonNull::dangling(),
            layout: None,
            locks: Box::default(),
        }
    }

    /// `pages` zeroed pages.
    pub fn new(pages: usize) -> Result<LockedPages, DmaError> {
        if pages == 0 {
            return Ok(LockedPages::empty());
        }
        let len = pages.checked_mul(PAGE).ok_or(DmaError::NoMemory)?;
        // An arena that spans a huge page is allocated in whole, aligned
        // huge pages, so every one of its pages can be backed by one.
        let (size, align) = if len >= HUGE {
            let size = len
                .checked_next_multiple_of(HUGE)
                .ok_or(DmaError::NoMemory)?;
            (size, HUGE)
        } else {
            (len, PAGE)
        };
        let layout = Layout::from_size_align(size, align).map_err(|_| DmaError::NoMemory)?;
        // SAFETY: `layout` has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc::alloc(layout) }).ok_or(DmaError::NoMemory)?;
        if align == HUGE {
            advise_huge(ptr, size);
        }
        // Zeroed after the advice, so the first touch already faults in
        // huge pages.
        // SAFETY: `ptr..ptr + size` was just allocated and is owned here.
        unsafe { ptr.as_ptr().write_bytes(0, size) };
        Ok(LockedPages {
            ptr,
            layout: Some(layout),
            locks: (0..pages).map(|_| PageLock::default()).collect(),
        })
    }

    /// Number of pages.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.locks.len()
    }

    /// The page's bytes, under its lock held shared; `None` past the end.
    #[inline(always)]
    pub fn read(&self, page: usize) -> Option<PageRead<'_>> {
        let guard = self.locks.get(page)?.read();
        Some(PageRead {
            _guard: guard,
            bytes: self.page_ptr(page),
        })
    }

    /// The page's bytes, under its lock held exclusive; `None` past the
    /// end.
    #[inline(always)]
    pub fn write(&self, page: usize) -> Option<PageWrite<'_>> {
        let guard = self.locks.get(page)?.write();
        Some(PageWrite {
            _guard: guard,
            bytes: self.page_ptr(page),
        })
    }

    /// Where page `page` starts. Called only for a page whose lock exists,
    /// so the page lies inside the allocation.
    #[inline(always)]
    fn page_ptr(&self, page: usize) -> NonNull<[u8; PAGE]> {
        // SAFETY: `page < self.locks.len()` (the caller found its lock), and
        // the allocation holds `locks.len() * PAGE` bytes or more, so the
        // offset stays inside it.
        unsafe { self.ptr.add(page * PAGE).cast() }
    }
}

impl Drop for LockedPages {
    fn drop(&mut self) {
        if let Some(layout) = self.layout {
            // SAFETY: allocated in `new` with this layout, freed only here.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// Asks the kernel to back `ptr..ptr + len` (2 MiB-aligned, whole huge
/// pages) with transparent huge pages. Advice only: where it is refused
/// or unavailable (and under Miri, which has no `madvise`), 4 KiB pages
/// serve as well.
#[cfg(all(target_os = "linux", not(miri)))]
fn advise_huge(ptr: NonNull<u8>, len: usize) {
    // SAFETY: the range is one live allocation owned by the caller;
    // MADV_HUGEPAGE changes how it is backed, never its contents.
    unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
}

#[cfg(any(not(target_os = "linux"), miri))]
fn advise_huge(_: NonNull<u8>, _: usize) {}

/// A page read: its bytes, its lock held shared until dropped.
pub struct PageRead<'a> {
    _guard: PageReadLock<'a>,
    bytes: NonNull<[u8; PAGE]>,
}

impl Deref for PageRead<'_> {
    type Target = [u8; PAGE];
    #[inline(always)]
    fn deref(&self) -> &[u8; PAGE] {
        // SAFETY: the page lies inside the arena, which outlives `'a`, and
        // its lock is held shared for as long as `self` (and so the
        // returned borrow) lives: no writer can reach the bytes meanwhile.
        unsafe { self.bytes.as_ref() }
    }
}

/// A page write: its bytes, its lock held exclusive until dropped.
pub struct PageWrite<'a> {
    _guard: PageWriteLock<'a>,
    bytes: NonNull<[u8; PAGE]>,
}

impl Deref for PageWrite<'_> {
    type Target = [u8; PAGE];
    #[inline(always)]
    fn deref(&self) -> &[u8; PAGE] {
        // SAFETY: as `PageRead::deref`, with the lock held exclusive.
        unsafe { self.bytes.as_ref() }
    }
}

impl PageWrite<'_> {
    /// Stores `dws` as little-endian `u32`s from byte `at` of the page (a
    /// queue entry kept as dwords), with no byte copy of them built
    /// first; `None`, and nothing written, if they do not fit in the page.
    #[inline(always)]
    pub fn put_u32s<const N: usize>(&mut self, at: usize, dws: &[u32; N]) -> Option<()> {
        let dst = self.get_mut(at..at.checked_add(N * 4)?)?;
        #[cfg(target_endian = "little")]
        {
            // SAFETY: `dws` is `N * 4` initialized bytes (a `u32` has no
            // padding), read as `u8`, which needs no alignment; on a
            // little-endian target they are the dwords' little-endian
            // bytes.
            let bytes = unsafe { core::slice::from_raw_parts(dws.as_ptr().cast::<u8>(), N * 4) };
            dst.copy_from_slice(bytes);
        }
        #[cfg(not(target_endian = "little"))]
        for (d, v) in dst.chunks_exact_mut(4).zip(dws) {
            d.copy_from_slice(&v.to_le_bytes());
        }
        Some(())
    }
}

impl DerefMut for PageWrite<'_> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [u8; PAGE] {
        // SAFETY: the page lies inside the arena, which outlives `'a`, and
        // its lock is held exclusive for as long as `self` lives; the
        // `&mut self` borrow makes this the only reference into the page.
        unsafe { self.bytes.as_mut() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_zeroed_aligned_contiguous_and_bounded() {
        for pages in [1, 3, HUGE / PAGE + 1] {
            let arena = LockedPages::new(pages).unwrap();
            assert_eq!(arena.len(), pages);
            let first = arena.read(0).unwrap().as_ptr() as usize;
            let align = if pages * PAGE >= HUGE { HUGE } else { PAGE };
            assert_eq!(first % align, 0, "{pages} pages");
            let last = arena.read(pages - 1).unwrap();
            assert_eq!(last.as_ptr() as usize, first + (pages - 1) * PAGE);
            assert!(last.iter().all(|&b| b == 0));
            drop(last);
            arena.write(pages - 1).unwrap()[PAGE - 1] = 7;
            assert_eq!(arena.read(pages - 1).unwrap()[PAGE - 1], 7);
            assert!(arena.read(pages).is_none());
            assert!(arena.write(pages).is_none());
        }
        assert_eq!(LockedPages::new(0).unwrap().len(), 0);
        assert!(LockedPages::empty().read(0).is_none());
    }

    #[test]
    fn readers_never_see_a_page_half_written() {
        // Two writers fill the page with one byte each turn while two
        // readers check it is all one byte: every reader that finds a
        // writer, and every writer that finds readers, takes the slow path
        // and must leave the lock's count as it found it.
        let arena = LockedPages::new(1).unwrap();
        // Miri interprets every byte the turns fill and scan.
        let turns: u32 = if cfg!(miri) { 20 } else { 20_000 };
        std::thread::scope(|s| {
            for w in 0..2u8 {
                let arena = &arena;
                s.spawn(move || {
                    for i in 0..turns {
                        arena.write(0).unwrap().fill((i as u8) ^ (w << 7));
                    }
                });
            }
            for _ in 0..2 {
                let arena = &arena;
                s.spawn(move || {
                    for _ in 0..turns {
                        let page = arena.read(0).unwrap();
                        assert!(page.iter().all(|&b| b == page[0]), "a torn page");
                    }
                });
            }
        });
        assert_eq!(
            arena.locks[0].0.load(Ordering::Relaxed),
            0,
            "lock left held"
        );
        arena.write(0).unwrap()[0] = 1;
        assert_eq!(arena.read(0).unwrap()[0], 1);
    }
}
