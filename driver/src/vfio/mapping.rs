//! A memory mapping shared with a device (a BAR or DMA memory), with
//! bounds-checked accessors. One of the two leaf modules of the crate that
//! contain unsafe code; everything above it is safe.
//!
//! The device may change the memory at any time, so scalar accesses are
//! volatile (never merged, split or cached by the compiler); bulk copies
//! are plain copies whose ordering the caller establishes with a volatile
//! read and a fence (the completion entry's status dword), as on any
//! DMA-coherent platform.
#![allow(unsafe_code)]

use core::ptr::NonNull;
use core::sync::atomic::{fence, Ordering};

use crate::hal::DmaError;

/// An owned `mmap` region: unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; every
// access goes through methods that take `&self` and use volatile or
// bounds-checked raw copies, which are sound to run from any thread (races
// with the device or other threads only affect the bytes read, as with any
// DMA memory).
unsafe impl Send for Mapping {}
// SAFETY: as above; no method hands out references into the mapping.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Takes ownership of a mapping.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be a live `mmap` mapping, readable and writable,
    /// that nothing else unmaps; this value will `munmap` it on drop.
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
    /// Volatile 32-bit read at a 4-byte aligned offset.
    pub fn read_u32(&self, offset: usize) -> Result<u32, DmaError> {
        self.check(offset, 4, 4)?;
        // SAFETY: `check` keeps `offset..offset+4` inside the live mapping
        // and 4-byte aligned (the mapping is page aligned).
        let v = unsafe { self.ptr.as_ptr().add(offset).cast::<u32>().read_volatile() };
        fence(Ordering::Acquire);
        Ok(u32::from_le(v))
    }
    /// Volatile 32-bit write at a 4-byte aligned offset.
    pub fn write_u32(&self, offset: usize, value: u32) -> Result<(), DmaError> {
        self.check(offset, 4, 4)?;
        fence(Ordering::Release);
        // SAFETY: as in `read_u32`.
        unsafe {
            self.ptr
                .as_ptr()
                .add(offset)
                .cast::<u32>()
                .write_volatile(value.to_le())
        };
        Ok(())
    }
    /// Volatile 64-bit read at an 8-byte aligned offset.
    pub fn read_u64(&self, offset: usize) -> Result<u64, DmaError> {
        self.check(offset, 8, 8)?;
        // SAFETY: `check` keeps the access inside the mapping and aligned.
        let v = unsafe { self.ptr.as_ptr().add(offset).cast::<u64>().read_volatile() };
        fence(Ordering::Acquire);
        Ok(u64::from_le(v))
    }
    /// Volatile 64-bit write at an 8-byte aligned offset.
    pub fn write_u64(&self, offset: usize, value: u64) -> Result<(), DmaError> {
        self.check(offset, 8, 8)?;
        fence(Ordering::Release);
        // SAFETY: as in `read_u64`.
        unsafe {
            self.ptr
                .as_ptr()
                .add(offset)
                .cast::<u64>()
                .write_volatile(value.to_le())
        };
        Ok(())
    }
    /// Copies bytes out.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        self.check(offset, dst.len(), 1)?;
        fence(Ordering::Acquire);
        // SAFETY: the source range is inside the mapping (checked); `dst` is
        // a distinct Rust slice, so the ranges cannot overlap.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        Ok(())
    }
    /// Copies bytes in.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        self.check(offset, src.len(), 1)?;
        // SAFETY: the destination range is inside the mapping (checked);
        // `src` is a distinct Rust slice.
        unsafe {
            core::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len())
        };
        fence(Ordering::Release);
        Ok(())
    }
    /// Sets a run of bytes.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), DmaError> {
        self.check(offset, len, 1)?;
        // SAFETY: the range is inside the mapping (checked).
        unsafe { core::ptr::write_bytes(self.ptr.as_ptr().add(offset), byte, len) };
        fence(Ordering::Release);
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `from_raw`'s contract: this value owns the mapping and
        // no accessor can run after drop.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
