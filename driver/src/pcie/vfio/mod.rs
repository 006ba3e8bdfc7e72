//! The VFIO backend (Linux, feature `vfio`): the driver on a real NVMe
//! controller bound to `vfio-pci`, through the type1 container/group
//! interface.
//!
//! A [`VfioContainer`] is one IOMMU address space: [`VfioContainer::attach`]
//! finds a controller's IOMMU group, attaches it to the container (with
//! the type1 IOMMU), takes the device fd, enables memory decoding and bus
//! mastering in PCI config space (vfio-pci leaves bus mastering off), and
//! maps BAR0. The result is an [`MmioBar`] (the `Registers`); the
//! container's [`VfioDma`] (the `DmaAllocator`) completes a
//! [`PcieTransport`]. [`open`] is one controller in a container of its
//! own; the legs of a volume are attached to one container and share its
//! page-cache frames, mapped once ([`NvmeDevice::vfio_on`]).
//!
//! Unsafe code lives only in [`mapping`] (volatile access to mapped memory)
//! and [`sys`] (the system calls); this file and the two adapters are safe
//! and run against a test double of [`sys::VfioSys`].

pub mod container;
pub mod dma;
pub mod mapping;
pub mod mmio;
pub mod sys;

use alloc::sync::Arc;
use core::fmt;

pub use container::{VfioContainer, VfioFrames};
pub use dma::{VfioDma, VfioRegion};
pub use mmio::MmioBar;
pub use sys::FdGuard;
use sys::{Errno, LinuxSys, VfioSys};

use crate::clock::Clock;
use crate::controller::DriverConfig;
use crate::device::NvmeDevice;
use crate::error::DriverError;
use crate::pcie::hal::DmaError;
use crate::pcie::PcieTransport;

/// PCIe to a VFIO-bound controller.
pub type VfioTransport = PcieTransport<MmioBar, VfioDma>;

/// The driver on a VFIO-bound controller.
pub type VfioDevice = NvmeDevice<VfioTransport>;

/// Why the VFIO backend could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum VfioError {
    /// The PCI address is not of the form `dddd:bb:dd.f`.
    BadAddress,
    /// A system call failed.
    Sys {
        /// Which step.
        call: &'static str,
        /// The `errno`.
        errno: i32,
    },
    /// The kernel speaks another VFIO API version.
    ApiVersion(i32),
    /// The type1 IOMMU is not available.
    NoType1,
    /// Not every device in the IOMMU group is bound to vfio-pci.
    NotViable,
    /// BAR0 is missing, too small or cannot be mmap'd.
    Bar0,
    /// Frames from another container, which this controller cannot
    /// reach.
    OtherContainer,
    /// The PCI resource list in sysfs is malformed.
    BarAddresses,
    /// A BAR's bus address lies inside DMA memory the container already
    /// handed out.
    DmaOverBar,
    /// The controller failed to come up.
    Driver(DriverError<DmaError>),
}

impl std::error::Error for VfioError {}

impl fmt::Display for VfioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VfioError::BadAddress => write!(f, "malformed PCI address"),
            VfioError::Sys { call, errno } => write!(f, "{call} failed: errno {errno}"),
            VfioError::ApiVersion(v) => write!(f, "unsupported VFIO API version {v}"),
            VfioError::NoType1 => write!(f, "type1 IOMMU not supported"),
            VfioError::NotViable => write!(
                f,
                "IOMMU group not viable (bind all its devices to vfio-pci)"
            ),
            VfioError::Bar0 => write!(f, "BAR0 unusable"),
            VfioError::BarAddresses => write!(f, "malformed PCI resource list in sysfs"),
            VfioError::DmaOverBar => write!(
                f,
                "a BAR's bus address lies inside DMA memory already handed out (attach every \
                 controller before allocating DMA memory)"
            ),
            VfioError::OtherContainer => write!(
                f,
                "page-cache frames from another VFIO container (open every controller of \
                 a volume in one container)"
            ),
            VfioError::Driver(e) => write!(f, "controller: {e}"),
        }
    }
}

impl From<DriverError<DmaError>> for VfioError {
    fn from(e: DriverError<DmaError>) -> Self {
        VfioError::Driver(e)
    }
}

fn sys_err(call: &'static str) -> impl Fn(Errno) -> VfioError {
    move |e| VfioError::Sys { call, errno: e.0 }
}

/// `dddd:bb:dd.f`, hex digits only, so the address is safe to put in a
/// sysfs path.
fn valid_pci_address(a: &str) -> bool {
    let b = a.as_bytes();
    b.len() == 12
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b':',
            10 => c == b'.',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Opens the controller at PCI address `pci` (e.g. `0000:00:04.0`) in a
/// container of its own.
pub fn open(pci: &str) -> Result<(MmioBar, VfioDma), VfioError> {
    open_with(Arc::new(LinuxSys), pci)
}

/// [`open`] over any implementation of the system calls.
pub fn open_with(sys: Arc<dyn VfioSys>, pci: &str) -> Result<(MmioBar, VfioDma), VfioError> {
    if !valid_pci_address(pci) {
        return Err(VfioError::BadAddress);
    }
    let container = VfioContainer::open_with(sys)?;
    let bar = container.attach(pci)?;
    Ok((bar, container.dma()))
}

impl NvmeDevice<VfioTransport> {
    /// Brings up the controller at PCI address `pci` (bound to vfio-pci)
    /// with `frames` page-cache frames in DMA memory.
    pub fn vfio(
        pci: &str,
        config: DriverConfig,
        frames: u32,
        clock: impl Clock + 'static,
    ) -> Result<VfioDevice, VfioError> {
        let (bar, dma) = open(pci)?;
        let transport = PcieTransport::new(Arc::new(bar), dma);
        Ok(NvmeDevice::new(transport, clock, config, frames)?)
    }

    /// Brings up the controller at PCI address `pci` in `container`,
    /// serving `frames`, which the container made
    /// ([`VfioContainer::frames`]): the controllers of one container share
    /// one page cache that way (the legs of a volume). Frames of another
    /// container are refused: that controller could not reach them.
    pub fn vfio_on(
        container: &VfioContainer,
        pci: &str,
        config: DriverConfig,
        frames: Arc<VfioFrames>,
        clock: impl Clock + 'static,
    ) -> Result<VfioDevice, VfioError> {
        let bar = container.attach(pci)?;
        Self::vfio_attached(container, bar, config, frames, clock)
    }

    /// As [`vfio_on`](Self::vfio_on), for a controller already attached
    /// to `container` (its BAR from [`VfioContainer::attach`]).
    pub fn vfio_attached(
        container: &VfioContainer,
        bar: MmioBar,
        config: DriverConfig,
        frames: Arc<VfioFrames>,
        clock: impl Clock + 'static,
    ) -> Result<VfioDevice, VfioError> {
        if !container.holds(&frames) {
            return Err(VfioError::OtherContainer);
        }
        let transport = PcieTransport::new(Arc::new(bar), container.dma());
        Ok(NvmeDevice::with_arena(transport, clock, config, frames)?)
    }
}

#[cfg(test)]
mod tests;
