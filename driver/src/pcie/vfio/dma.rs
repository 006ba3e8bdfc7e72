//! DMA memory for the VFIO backend: anonymous shared memory (2 MiB
//! hugepages for regions that large, when the pool has them: see `pollfs
//! setup`), pinned and mapped into one container's IOMMU space at IOVAs
//! chosen here, so every controller of the container reaches it.
//!
//! IOVAs are handed out upwards from 4 GiB, never inside a range
//! [reserved](VfioDma::reserve) for the bus addresses of the attached
//! controllers' BARs: a DMA address equal to a BAR's bus address may be
//! taken for a peer-to-peer access and never reach the IOMMU (and QEMU's
//! NVMe controller refuses any data pointer inside its own BAR0, whatever
//! the IOMMU says).

use alloc::sync::Arc;
use alloc::vec::Vec;
use std::sync::{Mutex, PoisonError};

use super::mapping::Mapping;
use super::sys::FdGuard;
use super::sys::VfioSys;
use crate::pcie::hal::{DmaAllocator, DmaError, DmaRegion, Iova};

const PAGE: usize = 4096;
/// The x86-64 hugepage size `map_anon` tries for large regions.
const HUGE_PAGE: usize = 2 << 20;
/// First IOVA handed out: above the 32-bit window, where x86 platforms
/// reserve ranges (the MSI doorbell at 0xfee0_0000).
const IOVA_BASE: u64 = 1 << 32;

/// The container's IOVA space: a bump allocator that steps over reserved
/// ranges.
#[derive(Debug)]
struct IovaSpace {
    /// Lowest IOVA not handed out; everything from `IOVA_BASE` below it
    /// may be in use.
    next: u64,
    /// Half-open ranges no region may overlap.
    reserved: Vec<(u64, u64)>,
}

impl IovaSpace {
    /// The first `align`-aligned IOVA at or above `next` where `size`
    /// bytes and a gap page after them overlap no reserved range; `next`
    /// moves past them.
    fn take(&mut self, size: u64, align: u64) -> Option<u64> {
        let mut iova = self.next.checked_next_multiple_of(align)?;
        loop {
            let end = iova.checked_add(size)?.checked_add(PAGE as u64)?;
            match self
                .reserved
                .iter()
                .find(|&&(start, stop)| start < end && iova < stop)
            {
                Some(&(_, stop)) => iova = stop.checked_next_multiple_of(align)?,
                None => {
                    self.next = end;
                    return Some(iova);
                }
            }
        }
    }
}

#[derive(Debug)]
struct DmaInner {
    sys: Arc<dyn VfioSys>,
    container: Arc<FdGuard>,
    space: Mutex<IovaSpace>,
}

/// Allocates DMA regions in one VFIO container; clones share the
/// container's one IOVA allocator.
#[derive(Clone, Debug)]
pub struct VfioDma {
    inner: Arc<DmaInner>,
}

impl VfioDma {
    pub(super) fn new(sys: Arc<dyn VfioSys>, container: Arc<FdGuard>) -> VfioDma {
        VfioDma {
            inner: Arc::new(DmaInner {
                sys,
                container,
                space: Mutex::new(IovaSpace {
                    next: IOVA_BASE,
                    reserved: Vec::new(),
                }),
            }),
        }
    }
    /// Keeps IOVAs `start..end` out of every later region. False if a
    /// region already handed out may lie there (the range is reserved
    /// anyway): reserve before allocating.
    pub fn reserve(&self, start: u64, end: u64) -> bool {
        let mut space = self
            .inner
            .space
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        space.reserved.push((start, end));
        end <= IOVA_BASE || start >= space.next
    }
    /// True if `region` was allocated here (so it is mapped in this
    /// container's IOMMU space).
    pub fn owns(&self, region: &VfioRegion) -> bool {
        Arc::ptr_eq(&self.inner, &region.inner)
    }
}

/// One pinned, IOMMU-mapped region; unmapped from the IOMMU and then from
/// the process on drop.
#[derive(Debug)]
pub struct VfioRegion {
    map: Mapping,
    iova: u64,
    inner: Arc<DmaInner>,
}

impl Drop for VfioRegion {
    fn drop(&mut self) {
        let fd = self.inner.container.fd();
        let _ = self
            .inner
            .sys
            .dma_unmap(fd, self.iova, self.map.len() as u64);
    }
}

impl DmaRegion for VfioRegion {
    fn len(&self) -> usize {
        self.map.len()
    }
    fn iova(&self) -> Iova {
        Iova(self.iova)
    }
    #[inline]
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        self.map.read(offset, dst)
    }
    #[inline]
    fn read_u32(&self, offset: usize) -> Result<u32, DmaError> {
        self.map.read_u32(offset)
    }
    #[inline]
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        self.map.write(offset, src)
    }
    #[inline]
    fn write_u32s(&self, offset: usize, src: &[u32]) -> Result<(), DmaError> {
        self.map.write_u32s(offset, src)
    }
    fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), DmaError> {
        self.map.fill(offset, len, byte)
    }
}

impl DmaAllocator for VfioDma {
    type Region = VfioRegion;
    fn alloc(&self, len: usize) -> Result<VfioRegion, DmaError> {
        let len = len
            .max(1)
            .checked_next_multiple_of(PAGE)
            .ok_or(DmaError::NoMemory)?;
        let map = self
            .inner
            .sys
            .map_anon(len)
            .map_err(|_| DmaError::NoMemory)?;
        // The mapping may be larger (rounded up to a hugepage). A gap page
        // between regions, so a device overrun faults in the IOMMU instead
        // of landing in a neighbour; hugepage-backed regions start on a
        // hugepage boundary so the IOMMU can map them with large pages.
        let size = map.len() as u64;
        let align = if map.len() >= HUGE_PAGE {
            HUGE_PAGE as u64
        } else {
            PAGE as u64
        };
        let iova = self
            .inner
            .space
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(size, align)
            .ok_or(DmaError::NoMemory)?;
        let fd = self.inner.container.fd();
        self.inner
            .sys
            .dma_map(fd, &map, iova)
            .map_err(|_| DmaError::NoMemory)?;
        Ok(VfioRegion {
            map,
            iova,
            inner: self.inner.clone(),
        })
    }
}
