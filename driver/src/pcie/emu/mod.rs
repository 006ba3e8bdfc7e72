//! An emulated NVMe controller (std): the device side of the same
//! registers and rings the driver uses, over plain memory.
//!
//! [`EmuController`] implements [`crate::pcie::hal::Registers`];
//! [`EmuMemory`] implements [`crate::pcie::hal::DmaAllocator`] and lets the
//! device reach host memory by bus address. Commands run when the SQ
//! doorbell is written, on the writer's thread, against a namespace in RAM
//! or in a file; data moves outside the controller's state lock, so
//! different queues' transfers run in parallel. The fault knobs
//! ([`Faults`]) make it slow, out of order, failing, forgetful, fatal or
//! hostile on demand. A namespace can be formatted with end-to-end
//! protection information ([`Metadata`]), generated and checked as the
//! spec says, with its stored tuples open to corruption.
//!
//! `NvmeDevice::emulated` puts the three together, so the engine can run
//! on the real driver code without hardware.

mod commands;
mod controller;
mod faults;
mod medium;
mod memory;
mod pages;
mod protection;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_parallel;
mod transfer;

use std::sync::Arc;
use std::time::Instant;

use pollfs_core::dev::DevError;
use pollfs_core::units::Nanos;

pub use controller::{EmuConfig, EmuController, EmuStats};
pub use faults::{Faults, Hostile};
pub use medium::Medium;
pub use memory::{DmaBytes, EmuMemory, EmuRegion};
pub use protection::Metadata;

use crate::clock::Clock;
use crate::controller::DriverConfig;
use crate::device::NvmeDevice;
use crate::error::DriverError;
use crate::pcie::hal::DmaError;
use crate::pcie::PcieTransport;

/// PCIe to the emulated controller.
pub type EmuTransport = PcieTransport<EmuController, EmuMemory>;

/// The driver on the emulated controller.
pub type EmulatedDevice = NvmeDevice<EmuTransport>;

/// Page-cache frames in emulated DMA memory.
pub type EmuFrames = crate::pcie::NvmeFrames<EmuRegion>;

/// A monotonic clock from `std::time::Instant`, for hosted use.
#[derive(Clone, Copy, Debug)]
pub struct StdClock {
    start: Instant,
}

impl StdClock {
    /// A clock counting from now.
    pub fn new() -> StdClock {
        StdClock {
            start: Instant::now(),
        }
    }
}

impl Default for StdClock {
    fn default() -> Self {
        StdClock::new()
    }
}

impl Clock for StdClock {
    fn now(&self) -> Nanos {
        Nanos(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

impl NvmeDevice<EmuTransport> {
    /// The driver brought up on an emulated controller over a zeroed RAM
    /// namespace of `bytes` bytes with `block_size`-byte blocks (512 or
    /// 4096), and `frames` page-cache frames. The same shape as
    /// `RamDevice::new`, so it can stand in for it.
    pub fn emulated(bytes: u64, block_size: u32, frames: u32) -> Result<EmulatedDevice, DevError> {
        if block_size != 512 && block_size != 4096 {
            return Err(DevError::BadGeometry);
        }
        let emu = EmuConfig {
            bytes,
            block_size,
            ..EmuConfig::default()
        };
        let (dev, _) = Self::emulated_with(emu, DriverConfig::default(), frames, StdClock::new())
            .map_err(DevError::from)?;
        Ok(dev)
    }

    /// As [`emulated`](Self::emulated) with full control: the controller's
    /// shape, the driver's tunables, and the clock for admin waits. Also
    /// returns the controller, for its fault knobs and counters.
    pub fn emulated_with(
        emu: EmuConfig,
        config: DriverConfig,
        frames: u32,
        clock: impl Clock + 'static,
    ) -> Result<(EmulatedDevice, Arc<EmuController>), DriverError<DmaError>> {
        let mem = EmuMemory::new();
        let ctrl = EmuController::new(emu, mem.clone());
        let transport = PcieTransport::new(ctrl.clone(), mem);
        let dev = NvmeDevice::new(transport, clock, config, frames)?;
        Ok((dev, ctrl))
    }

    /// As [`emulated_with`](Self::emulated_with), for a controller on
    /// `memory`, an IOVA space other emulated controllers may share (as
    /// devices in one VFIO container share an IOMMU domain), serving the
    /// page cache in `arena`, frames allocated from that memory: several
    /// such controllers are the legs of one volume with no copying.
    pub fn emulated_on(
        emu: EmuConfig,
        config: DriverConfig,
        memory: &EmuMemory,
        arena: Arc<EmuFrames>,
        clock: impl Clock + 'static,
    ) -> Result<(EmulatedDevice, Arc<EmuController>), DriverError<DmaError>> {
        let ctrl = EmuController::new(emu, memory.clone());
        let transport = PcieTransport::new(ctrl.clone(), memory.clone());
        let dev = NvmeDevice::with_arena(transport, clock, config, arena)?;
        Ok((dev, ctrl))
    }
}
