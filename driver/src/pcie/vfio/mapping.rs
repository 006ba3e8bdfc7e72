//! A memory mapping shared with a device (a BAR or DMA memory), with
//! bounds-checked accessors. One of the two leaf modules of the crate that
//! contain unsafe code; everything above it is safe.
//!
//! Two kinds of memory go through it. Register (BAR) mappings get
//! exact-width volatile accesses, because a register access must be one
//! bus transaction of the right size. DMA memory gets an atomic-word view
//! ([`crate::pcie::words`]): the device and several threads may touch it at any
//! moment, and atomics keep every such access defined.
#![allow(unsafe_code)]

use core::ptr::NonNull;
use core::sync::atomic::{fence, AtomicU64, Ordering};

use crate::pcie::hal::DmaError;
use crate::pcie::words::WordView;

/// An owned `mmap` region: unmapped on drop. Its length is a multiple of
/// the page size.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value; every access goes through
// bounds-checked methods taking `&self` that use either volatile register
// accesses or atomic words, both sound to run from any thread.
unsafe impl Send for Mapping {}
// SAFETY: as above; no method hands out references into the mapping.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Takes ownership of a mapping.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be a live, page-aligned `mmap` mapping, readable
    /// and writable, that nothing else accesses or unmaps; this value will
    /// `munmap` it on drop.
    pub unsafe fn from_raw(ptr: NonNull<u8>, len: usize) -> Mapping {
        Mapping { ptr, len }
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The CPU address, for handing to the IOMMU (never dereferenced by
    /// callers).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }
    fn check(&self, offset: usize, n: usize, align: usize) -> Result<(), DmaError> {
        let end = offset.checked_add(n).ok_or(DmaError::OutOfBounds)?;
        if end > self.len || offset % align != 0 {
            return Err(DmaError::OutOfBounds);
        }
        Ok(())
    }

    // ---- Device registers (BAR): exact-width volatile accesses. ----

    /// Volatile 32-bit load at a 4-byte aligned offset, then an Acquire
    /// fence so later reads of DMA memory are not hoisted above it.
    pub fn mmio_read32(&self, offset: usize) -> Result<u32, DmaError> {
        self.check(offset, 4, 4)?;
        // SAFETY: `check` keeps `offset..offset+4` inside the live mapping
        // and 4-byte aligned (the mapping is page aligned). Register
        // mappings are device memory outside Rust's allocations, accessed
        // only through these volatile calls.
        let v = unsafe { self.ptr.as_ptr().add(offset).cast::<u32>().read_volatile() };
        fence(Ordering::Acquire);
        Ok(u32::from_le(v))
    }
    /// Release fence (earlier DMA-memory writes become visible first), then
    /// a volatile 32-bit store at a 4-byte aligned offset.
    pub fn mmio_write32(&self, offset: usize, value: u32) -> Result<(), DmaError> {
        self.check(offset, 4, 4)?;
        fence(Ordering::Release);
        // SAFETY: as in `mmio_read32`.
        unsafe {
            self.ptr
                .as_ptr()
                .add(offset)
                .cast::<u32>()
                .write_volatile(value.to_le())
        };
        Ok(())
    }

    // ---- DMA memory: atomic words, see `crate::pcie::words`. ----

    #[inline]
    fn view(&self) -> WordView<'_> {
        // SAFETY: the mapping is page aligned and `len / 8` whole words lie
        // inside it; it stays mapped while `self` (and so the returned
        // borrow) lives; `AtomicU64` has the size and alignment of `u64`;
        // and Rust code reaches DMA memory only through this atomic view,
        // so concurrent accesses from threads are atomic, not racy.
        let words = unsafe {
            core::slice::from_raw_parts(self.ptr.as_ptr().cast::<AtomicU64>(), self.len / 8)
        };
        WordView::new(words, self.len)
    }
    /// Copies bytes out.
    #[inline]
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        self.view().read(offset, dst)
    }
    /// Reads the little-endian `u32` at a 4-byte aligned offset with one
    /// load.
    #[inline]
    pub fn read_u32(&self, offset: usize) -> Result<u32, DmaError> {
        self.view().read_u32(offset)
    }
    /// Copies bytes in.
    #[inline]
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        self.view().write(offset, src)
    }
    /// Writes little-endian `u32`s.
    #[inline]
    pub fn write_u32s(&self, offset: usize, src: &[u32]) -> Result<(), DmaError> {
        self.view().write_u32s(offset, src)
    }
    /// Sets a run of bytes.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), DmaError> {
        self.view().fill(offset, len, byte)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `from_raw`'s contract: this value owns the mapping and
        // no accessor can run after drop.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
