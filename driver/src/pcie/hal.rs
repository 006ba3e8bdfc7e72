//! The two hardware boundaries the PCIe transport is generic over:
//! controller registers (BAR0) and DMA-capable memory.
//!
//! Real hardware implements them with an mmap'd BAR and IOMMU-mapped memory;
//! the emulated controller implements them over plain memory. The PCIe
//! rings, PRP lists and frames go through these traits, so the same code
//! runs on both, and a test can stand a fake beside either. Nothing above
//! the transport seam sees them.

use alloc::sync::Arc;

use pollfs_core::units::Nanos;

/// A bus (IOVA) address: what the device sees, never a CPU pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Iova(pub u64);

impl Iova {
    /// The address `off` bytes further on, or `None` on overflow.
    pub fn checked_add(self, off: u64) -> Option<Iova> {
        self.0.checked_add(off).map(Iova)
    }
}

/// 32/64-bit access to the controller's register file (BAR0 offsets).
///
/// Offsets outside the register file must not fault: reads return all ones
/// (what PCIe returns for an unclaimed read) and writes are dropped.
/// A register write must be ordered after every earlier write to DMA memory
/// made by the same thread (the driver also issues a Release fence before
/// each doorbell, so an implementation over ordinary memory gets this for
/// free).
pub trait Registers: Send + Sync {
    /// Reads the 32-bit register at `offset`.
    fn read32(&self, offset: usize) -> u32;
    /// Writes the 32-bit register at `offset`.
    fn write32(&self, offset: usize, value: u32);
    /// Reads a 64-bit register as two 32-bit halves, low first, which the
    /// NVMe spec (3.1) allows for every 64-bit register.
    fn read64(&self, offset: usize) -> u64 {
        let lo = u64::from(self.read32(offset));
        let hi = u64::from(self.read32(offset.wrapping_add(4)));
        lo | (hi << 32)
    }
    /// Writes a 64-bit register as two 32-bit halves, low first.
    fn write64(&self, offset: usize, value: u64) {
        self.write32(offset, value as u32);
        self.write32(offset.wrapping_add(4), (value >> 32) as u32);
    }
    /// Tells simulated hardware the caller's current time. Real hardware
    /// keeps its own time and ignores this; the emulated controller uses it
    /// to release completions it is holding back to model latency.
    fn tick(&self, _now: Nanos) {}
}

impl<T: Registers + ?Sized> Registers for Arc<T> {
    fn read32(&self, offset: usize) -> u32 {
        (**self).read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        (**self).write32(offset, value)
    }
    fn read64(&self, offset: usize) -> u64 {
        (**self).read64(offset)
    }
    fn write64(&self, offset: usize, value: u64) {
        (**self).write64(offset, value)
    }
    fn tick(&self, now: Nanos) {
        (**self).tick(now)
    }
}

/// Why a DMA memory access or allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DmaError {
    /// The access falls outside the region (or the bus address is unmapped).
    OutOfBounds,
    /// No DMA memory left.
    NoMemory,
}

impl core::error::Error for DmaError {}

impl core::fmt::Display for DmaError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DmaError::OutOfBounds => write!(f, "DMA access out of bounds"),
            DmaError::NoMemory => write!(f, "out of DMA memory"),
        }
    }
}

/// One contiguous, page-aligned run of DMA memory, with a CPU view (the
/// methods) and a bus address the device uses.
///
/// Every access is bounds-checked and returns an error rather than
/// panicking, so an offset computed from device data can never reach
/// outside the region.
pub trait DmaRegion: Send + Sync {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True for an empty region.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bus address of byte 0.
    fn iova(&self) -> Iova;
    /// True if every read, write or fill that stays inside one 4 KiB page
    /// (page-aligned from the region's start) happens as one unit, so no
    /// concurrent access to that page sees it half done.
    fn page_atomic(&self) -> bool {
        false
    }
    /// Copies bytes `[offset, offset + dst.len())` out.
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError>;
    /// Copies `src` in at `offset`.
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), DmaError>;
    /// Sets `len` bytes from `offset` to `byte`.
    fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), DmaError>;
    /// Copies `dst.len()` bytes out of the region's 4 KiB page `page`
    /// (counted from the region's start), from byte `at` of that page: a
    /// page-cache frame's copy. A span that leaves the page or the region
    /// is `OutOfBounds`. Callers that checked the span against the page
    /// already (the frames) let an inlined implementation drop the second
    /// check.
    #[inline(always)]
    fn read_page(&self, page: usize, at: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        self.read(page_offset(page, at, dst.len())?, dst)
    }
    /// Copies `src` into the region's 4 KiB page `page` at byte `at`, as
    /// [`read_page`](Self::read_page).
    #[inline(always)]
    fn write_page(&self, page: usize, at: usize, src: &[u8]) -> Result<(), DmaError> {
        self.write(page_offset(page, at, src.len())?, src)
    }
    /// Reads a little-endian `u32`. Implementations over shared memory
    /// should make an aligned `u32` read a single access with Acquire
    /// ordering: the driver reads a completion's status dword this way and
    /// then the rest of the entry.
    fn read_u32(&self, offset: usize) -> Result<u32, DmaError> {
        let mut b = [0u8; 4];
        self.read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    /// Writes a little-endian `u32`.
    fn write_u32(&self, offset: usize, value: u32) -> Result<(), DmaError> {
        self.write(offset, &value.to_le_bytes())
    }
    /// Writes `src` as consecutive little-endian `u32`s (a queue entry
    /// kept as dwords), all or nothing. Implementations over real or
    /// emulated DMA memory write straight from the dwords, with no byte
    /// copy in between.
    fn write_u32s(&self, offset: usize, src: &[u32]) -> Result<(), DmaError> {
        check_span(offset, src.len().saturating_mul(4), self.len())?;
        for (i, &v) in src.iter().enumerate() {
            self.write_u32(offset + i * 4, v)?;
        }
        Ok(())
    }
    /// Reads a little-endian `u64`.
    fn read_u64(&self, offset: usize) -> Result<u64, DmaError> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    /// Writes a little-endian `u64`.
    fn write_u64(&self, offset: usize, value: u64) -> Result<(), DmaError> {
        self.write(offset, &value.to_le_bytes())
    }
}

/// Bytes in one page of a [`DmaRegion`] (the page-cache frame size).
pub const REGION_PAGE: usize = 4096;

/// Where byte `at` of 4 KiB page `page` of a region lies, if a span of `n`
/// bytes from there stays inside that page.
#[inline(always)]
pub fn page_offset(page: usize, at: usize, n: usize) -> Result<usize, DmaError> {
    match at.checked_add(n) {
        Some(end) if end <= REGION_PAGE => page
            .checked_mul(REGION_PAGE)
            .and_then(|base| base.checked_add(at))
            .ok_or(DmaError::OutOfBounds),
        _ => Err(DmaError::OutOfBounds),
    }
}

/// Checks that `[offset, offset + n)` lies within `len` bytes.
pub fn check_span(offset: usize, n: usize, len: usize) -> Result<(), DmaError> {
    match offset.checked_add(n) {
        Some(end) if end <= len => Ok(()),
        _ => Err(DmaError::OutOfBounds),
    }
}

/// A source of DMA memory.
pub trait DmaAllocator: Send + Sync {
    /// The regions this allocator hands out; dropping one unmaps it.
    type Region: DmaRegion + 'static;
    /// A zeroed region of at least `len` bytes, aligned to 4 KiB in both
    /// the CPU view and the bus address.
    fn alloc(&self, len: usize) -> Result<Self::Region, DmaError>;
}

/// Fakes of both hardware traits for unit tests of the layers above.
#[cfg(test)]
pub(crate) mod fake {
    use alloc::vec;
    use alloc::vec::Vec;

    use spin::Mutex;

    use super::{DmaError, DmaRegion, Iova, Registers};

    /// DMA memory in a plain vector.
    #[derive(Debug)]
    pub struct VecRegion {
        pub bytes: Mutex<Vec<u8>>,
        pub iova: u64,
    }

    impl VecRegion {
        pub fn new(len: usize, iova: u64) -> VecRegion {
            VecRegion {
                bytes: Mutex::new(vec![0; len]),
                iova,
            }
        }
    }

    impl DmaRegion for VecRegion {
        fn len(&self) -> usize {
            self.bytes.lock().len()
        }
        fn iova(&self) -> Iova {
            Iova(self.iova)
        }
        fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError> {
            let b = self.bytes.lock();
            let end = offset.checked_add(dst.len()).ok_or(DmaError::OutOfBounds)?;
            dst.copy_from_slice(b.get(offset..end).ok_or(DmaError::OutOfBounds)?);
            Ok(())
        }
        fn write(&self, offset: usize, src: &[u8]) -> Result<(), DmaError> {
            let mut b = self.bytes.lock();
            let end = offset.checked_add(src.len()).ok_or(DmaError::OutOfBounds)?;
            b.get_mut(offset..end)
                .ok_or(DmaError::OutOfBounds)?
                .copy_from_slice(src);
            Ok(())
        }
        fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), DmaError> {
            let mut b = self.bytes.lock();
            let end = offset.checked_add(len).ok_or(DmaError::OutOfBounds)?;
            b.get_mut(offset..end)
                .ok_or(DmaError::OutOfBounds)?
                .fill(byte);
            Ok(())
        }
    }

    /// Registers that record every write.
    #[derive(Debug, Default)]
    pub struct RecordingRegs {
        pub writes: Mutex<Vec<(usize, u32)>>,
    }

    impl Registers for RecordingRegs {
        fn read32(&self, _offset: usize) -> u32 {
            0
        }
        fn write32(&self, offset: usize, value: u32) {
            self.writes.lock().push((offset, value));
        }
    }
}
