//! DMA memory for the VFIO backend: anonymous shared memory (2 MiB
//! hugepages for regions that large, when the pool has them: see `pollfs
//! setup`), pinned and mapped into one container's IOMMU space at IOVAs
//! chosen here, so every controller of the container reaches it.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU64, Ordering};

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

#[derive(Debug)]
struct DmaInner {
    sys: Arc<dyn VfioSys>,
    container: Arc<FdGuard>,
    next: AtomicU64,
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
                next: AtomicU64::new(IOVA_BASE),
            }),
        }
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
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        self.map.read(offset, dst)
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        self.map.write(offset, src)
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
        let mut iova = 0;
        self.inner
            .next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |next| {
                iova = next.checked_next_multiple_of(align)?;
                iova.checked_add(size)?.checked_add(PAGE as u64)
            })
            .map_err(|_| DmaError::NoMemory)?;
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
