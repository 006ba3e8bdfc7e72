//! The VFIO backend (Linux, feature `vfio`): the driver on a real NVMe
//! controller bound to `vfio-pci`, through the type1 container/group
//! interface.
//!
//! [`open`] finds the device's IOMMU group, attaches it to a new container
//! with the type1 IOMMU, takes the device fd, enables memory decoding and
//! bus mastering in PCI config space (vfio-pci leaves bus mastering off),
//! and maps BAR0. The result is an [`MmioBar`] (the `Registers`) and a
//! [`VfioDma`] (the `DmaAllocator`) for a [`PcieTransport`].
//!
//! Unsafe code lives only in [`mapping`] (volatile access to mapped memory)
//! and [`sys`] (the system calls); this file and the two adapters are safe
//! and run against a test double of [`sys::VfioSys`].

pub mod dma;
pub mod mapping;
pub mod mmio;
pub mod sys;

use alloc::format;
use alloc::sync::Arc;
use core::fmt;

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

/// PCI command register bits: memory space enable and bus master enable.
const PCI_COMMAND: u64 = 4;
const PCI_COMMAND_MEMORY_MASTER: u16 = 0x6;
/// Smallest useful BAR0: registers plus the admin doorbells.
const MIN_BAR0: u64 = 0x1008;

/// Opens the controller at PCI address `pci` (e.g. `0000:00:04.0`).
pub fn open(pci: &str) -> Result<(MmioBar, VfioDma), VfioError> {
    open_with(Arc::new(LinuxSys), pci)
}

/// [`open`] over any implementation of the system calls.
pub fn open_with(sys: Arc<dyn VfioSys>, pci: &str) -> Result<(MmioBar, VfioDma), VfioError> {
    if !valid_pci_address(pci) {
        return Err(VfioError::BadAddress);
    }
    let link = sys
        .readlink(&format!("/sys/bus/pci/devices/{pci}/iommu_group"))
        .map_err(sys_err("readlink iommu_group"))?;
    let group_id: u32 = link
        .rsplit('/')
        .next()
        .and_then(|g| g.parse().ok())
        .ok_or(VfioError::BadAddress)?;

    let container = FdGuard::new(
        &sys,
        sys.open("/dev/vfio/vfio")
            .map_err(sys_err("open container"))?,
    );
    let version = sys
        .ioctl_value(container.fd(), sys::req::GET_API_VERSION, 0)
        .map_err(sys_err("VFIO_GET_API_VERSION"))?;
    if version != sys::API_VERSION {
        return Err(VfioError::ApiVersion(version));
    }
    let type1 = sys
        .ioctl_value(container.fd(), sys::req::CHECK_EXTENSION, sys::TYPE1_IOMMU)
        .map_err(sys_err("VFIO_CHECK_EXTENSION"))?;
    if type1 <= 0 {
        return Err(VfioError::NoType1);
    }

    let group_path = format!("/dev/vfio/{group_id}");
    let group = FdGuard::new(&sys, sys.open(&group_path).map_err(sys_err("open group"))?);
    let status = sys
        .group_status(group.fd())
        .map_err(sys_err("VFIO_GROUP_GET_STATUS"))?;
    if status.flags & sys::GROUP_VIABLE == 0 {
        return Err(VfioError::NotViable);
    }
    sys.set_container(group.fd(), container.fd())
        .map_err(sys_err("VFIO_GROUP_SET_CONTAINER"))?;
    sys.ioctl_value(container.fd(), sys::req::SET_IOMMU, sys::TYPE1_IOMMU)
        .map_err(sys_err("VFIO_SET_IOMMU"))?;
    let device = FdGuard::new(
        &sys,
        sys.device_fd(group.fd(), pci)
            .map_err(sys_err("VFIO_GROUP_GET_DEVICE_FD"))?,
    );

    let config = sys
        .region_info(device.fd(), sys::CONFIG_REGION)
        .map_err(sys_err("config region info"))?;
    let mut cmd = [0u8; 2];
    let at = config
        .offset
        .checked_add(PCI_COMMAND)
        .ok_or(VfioError::Bar0)?;
    sys.pread(device.fd(), &mut cmd, at)
        .map_err(sys_err("read PCI command"))?;
    let value = u16::from_le_bytes(cmd) | PCI_COMMAND_MEMORY_MASTER;
    sys.pwrite(device.fd(), &value.to_le_bytes(), at)
        .map_err(sys_err("write PCI command"))?;

    let bar = sys
        .region_info(device.fd(), sys::BAR0_REGION)
        .map_err(sys_err("BAR0 region info"))?;
    if bar.flags & sys::REGION_MMAP == 0 || bar.size < MIN_BAR0 {
        return Err(VfioError::Bar0);
    }
    let len = usize::try_from(bar.size).map_err(|_| VfioError::Bar0)?;
    let map = sys
        .map_fd(device.fd(), bar.offset, len)
        .map_err(sys_err("mmap BAR0"))?;
    let dma = VfioDma::new(sys.clone(), container.clone());
    Ok((MmioBar::new(map, device, group, container), dma))
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
}

#[cfg(test)]
mod tests;
