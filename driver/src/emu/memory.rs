//! DMA memory for the emulated controller: an IOVA space of regions made
//! of atomic words, shared by the driver (through [`DmaRegion`]) and the
//! device (through bus addresses).
//!
//! Atomics make concurrent access by "CPU" and "device" well defined in
//! safe Rust: whole-word loads are Acquire and stores Release, so a
//! completion's status dword written last is seen only after the rest of
//! the entry, as PCIe ordering guarantees on real hardware.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use spin::RwLock;

use crate::hal::{DmaAllocator, DmaError, DmaRegion, Iova};

const PAGE: u64 = 4096;
/// First bus address handed out; zero stays unmapped so a null PRP faults.
const IOVA_BASE: u64 = 0x1_0000_0000;

/// Bytes backed by atomic 64-bit words.
#[derive(Debug)]
pub struct AtomicBytes {
    words: Box<[AtomicU64]>,
    len: usize,
}

impl AtomicBytes {
    /// `len` zeroed bytes.
    pub fn new(len: usize) -> AtomicBytes {
        let words = (0..len.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        AtomicBytes { words, len }
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
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(DmaError::OutOfBounds),
        }
    }
    /// Copies bytes out.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        self.check(offset, dst.len())?;
        let mut done = 0;
        while done < dst.len() {
            let pos = offset + done;
            let (w, b) = (pos / 8, pos % 8);
            let n = (8 - b).min(dst.len() - done);
            let word = self.words.get(w).ok_or(DmaError::OutOfBounds)?;
            let bytes = word.load(Ordering::Acquire).to_le_bytes();
            dst[done..done + n].copy_from_slice(&bytes[b..b + n]);
            done += n;
        }
        Ok(())
    }
    /// Copies bytes in.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        self.check(offset, src.len())?;
        let mut done = 0;
        while done < src.len() {
            let pos = offset + done;
            let (w, b) = (pos / 8, pos % 8);
            let n = (8 - b).min(src.len() - done);
            let word = self.words.get(w).ok_or(DmaError::OutOfBounds)?;
            if n == 8 {
                let mut v = [0u8; 8];
                v.copy_from_slice(&src[done..done + 8]);
                word.store(u64::from_le_bytes(v), Ordering::Release);
            } else {
                let part = &src[done..done + n];
                let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                    let mut bytes = old.to_le_bytes();
                    bytes[b..b + n].copy_from_slice(part);
                    Some(u64::from_le_bytes(bytes))
                });
            }
            done += n;
        }
        Ok(())
    }
    /// Sets a run of bytes.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), DmaError> {
        self.check(offset, len)?;
        let chunk = [byte; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Space {
    regions: RwLock<BTreeMap<u64, Arc<AtomicBytes>>>,
    next: AtomicU64,
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
        EmuMemory {
            space: Arc::new(Space {
                regions: RwLock::new(BTreeMap::new()),
                next: AtomicU64::new(IOVA_BASE),
            }),
        }
    }
    /// The region holding `[iova, iova + len)` and the offset into it; an
    /// access that is unmapped or crosses a region end fails.
    fn resolve(&self, iova: u64, len: usize) -> Result<(Arc<AtomicBytes>, usize), DmaError> {
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
    mem: Arc<AtomicBytes>,
    iova: u64,
    space: Weak<Space>,
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
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        self.mem.read(offset, dst)
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        self.mem.write(offset, src)
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
        let mem = Arc::new(AtomicBytes::new(len));
        self.space.regions.write().insert(iova, mem.clone());
        Ok(EmuRegion {
            mem,
            iova,
            space: Arc::downgrade(&self.space),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_at_any_alignment() {
        let m = AtomicBytes::new(100);
        let src: Vec<u8> = (0..37).collect();
        m.write(5, &src).unwrap();
        let mut dst = vec![0u8; 37];
        m.read(5, &mut dst).unwrap();
        assert_eq!(dst, src);
        let mut one = [0u8; 1];
        m.read(4, &mut one).unwrap();
        assert_eq!(one, [0]);
        assert_eq!(m.read(90, &mut dst), Err(DmaError::OutOfBounds));
        assert_eq!(m.write(usize::MAX, &src), Err(DmaError::OutOfBounds));
        m.fill(0, 100, 0xee).unwrap();
        m.read(60, &mut dst).unwrap();
        assert!(dst.iter().all(|&b| b == 0xee));
    }

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
}
