//! BAR0 through a VFIO region mapping, as [`Registers`].

use alloc::sync::Arc;

use super::mapping::Mapping;
use super::sys::FdGuard;
use crate::pcie::hal::Registers;

/// The controller's register file, mmap'd from the VFIO device fd. Keeps
/// the device, group and container descriptors open while it lives.
#[derive(Debug)]
pub struct MmioBar {
    map: Mapping,
    _device: Arc<FdGuard>,
    _group: Arc<FdGuard>,
    _container: Arc<FdGuard>,
}

impl MmioBar {
    pub(super) fn new(
        map: Mapping,
        device: Arc<FdGuard>,
        group: Arc<FdGuard>,
        container: Arc<FdGuard>,
    ) -> MmioBar {
        MmioBar {
            map,
            _device: device,
            _group: group,
            _container: container,
        }
    }
    /// Size of the mapped BAR.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// True if nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl Registers for MmioBar {
    /// Volatile 32-bit load; an offset outside the BAR (or misaligned)
    /// reads as all ones, like an unclaimed PCIe read.
    fn read32(&self, offset: usize) -> u32 {
        self.map.mmio_read32(offset).unwrap_or(u32::MAX)
    }
    /// Volatile 32-bit store after a Release fence; offsets outside the BAR
    /// are dropped.
    fn write32(&self, offset: usize, value: u32) {
        let _ = self.map.mmio_write32(offset, value);
    }
}
