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
#![allow(unsafe_code)]

use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;
use std::alloc::{self, Layout};

use spin::{RwLock, RwLockReadGuard, RwLockWriteGuard};

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
    locks: Box<[RwLock<()>]>,
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
            locks: (0..pages).map(|_| RwLock::new(())).collect(),
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
/// or unavailable, 4 KiB pages serve as well.
#[cfg(target_os = "linux")]
fn advise_huge(ptr: NonNull<u8>, len: usize) {
    // SAFETY: the range is one live allocation owned by the caller;
    // MADV_HUGEPAGE changes how it is backed, never its contents.
    unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_: NonNull<u8>, _: usize) {}

/// A page read: its bytes, its lock held shared until dropped.
pub struct PageRead<'a> {
    _guard: RwLockReadGuard<'a, ()>,
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
    _guard: RwLockWriteGuard<'a, ()>,
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
}
