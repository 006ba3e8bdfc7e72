//! [`VfioContainer`]: one IOMMU address space, shared by every controller
//! attached to it.
//!
//! A VFIO container holds one set of DMA mappings (the type1 IOMMU keeps
//! them in every IOMMU domain of the groups attached to it). Controllers
//! that are to serve one page cache (the legs of a volume) are attached to
//! one container, so the page-cache frames are pinned and mapped once, at
//! one IOVA, and every controller reaches them there; their queues come
//! from the same IOVA allocator ([`VfioDma`]), so nothing overlaps.
//!
//! Groups are attached as controllers are: the first group attached sets
//! the type1 IOMMU (the kernel requires a group in the container before
//! `VFIO_SET_IOMMU`); a second controller in an already attached group
//! reuses the group's descriptor (a group can be opened only once).
//! Mapping before every group is attached is allowed (type1 replays the
//! container's mappings into a new domain), but callers attach every
//! controller first where they can, so bring-up does not depend on it.

use alloc::format;
use alloc::sync::Arc;
use alloc::vec::Vec;
use std::sync::{Mutex, PoisonError};

use super::dma::VfioDma;
use super::mmio::MmioBar;
use super::sys::{self, FdGuard, LinuxSys, VfioSys};
use super::{sys_err, valid_pci_address, VfioError};
use crate::pcie::frames::NvmeFrames;

/// The page-cache frames of controllers in one container.
pub type VfioFrames = NvmeFrames<super::VfioRegion>;

/// PCI command register bits: memory space enable and bus master enable.
const PCI_COMMAND: u64 = 4;
const PCI_COMMAND_MEMORY_MASTER: u16 = 0x6;
/// Smallest useful BAR0: registers plus the admin doorbells.
const MIN_BAR0: u64 = 0x1008;

/// IOMMU groups attached so far, by group number. Locked only while a
/// controller is attached.
#[derive(Debug, Default)]
struct Groups {
    attached: Vec<(u32, Arc<FdGuard>)>,
}

/// One VFIO container with the type1 IOMMU: the IOVA space and DMA memory
/// of every controller attached to it.
#[derive(Debug)]
pub struct VfioContainer {
    sys: Arc<dyn VfioSys>,
    fd: Arc<FdGuard>,
    dma: VfioDma,
    groups: Mutex<Groups>,
}

impl VfioContainer {
    /// Opens a new container (`/dev/vfio/vfio`) and checks that the kernel
    /// speaks VFIO's API and has the type1 IOMMU.
    pub fn open() -> Result<VfioContainer, VfioError> {
        VfioContainer::open_with(Arc::new(LinuxSys))
    }

    /// [`open`](Self::open) over any implementation of the system calls.
    pub fn open_with(sys: Arc<dyn VfioSys>) -> Result<VfioContainer, VfioError> {
        let fd = FdGuard::new(
            &sys,
            sys.open("/dev/vfio/vfio")
                .map_err(sys_err("open container"))?,
        );
        let version = sys
            .ioctl_value(fd.fd(), sys::req::GET_API_VERSION, 0)
            .map_err(sys_err("VFIO_GET_API_VERSION"))?;
        if version != sys::API_VERSION {
            return Err(VfioError::ApiVersion(version));
        }
        let type1 = sys
            .ioctl_value(fd.fd(), sys::req::CHECK_EXTENSION, sys::TYPE1_IOMMU)
            .map_err(sys_err("VFIO_CHECK_EXTENSION"))?;
        if type1 <= 0 {
            return Err(VfioError::NoType1);
        }
        Ok(VfioContainer {
            dma: VfioDma::new(sys.clone(), fd.clone()),
            sys,
            fd,
            groups: Mutex::new(Groups::default()),
        })
    }

    /// The container's DMA memory: every region it hands out is mapped in
    /// this container's IOMMU space, reachable by every controller
    /// attached to it.
    pub fn dma(&self) -> VfioDma {
        self.dma.clone()
    }

    /// `count` page-cache frames in the container's DMA memory, mapped
    /// once, for every controller attached to it.
    pub fn frames(&self, count: u32) -> Result<Arc<VfioFrames>, VfioError> {
        Ok(Arc::new(NvmeFrames::new(&self.dma, count)?))
    }

    /// True if `frames` are this container's (mapped in its IOMMU space).
    pub fn holds(&self, frames: &VfioFrames) -> bool {
        self.dma.owns(frames.region())
    }

    /// Attaches the controller at PCI address `pci` (e.g. `0000:00:04.0`,
    /// bound to vfio-pci): its IOMMU group joins the container, memory
    /// decoding and bus mastering are turned on in PCI config space
    /// (vfio-pci leaves bus mastering off), and BAR0 is mapped.
    pub fn attach(&self, pci: &str) -> Result<MmioBar, VfioError> {
        if !valid_pci_address(pci) {
            return Err(VfioError::BadAddress);
        }
        let sys = &self.sys;
        let link = sys
            .readlink(&format!("/sys/bus/pci/devices/{pci}/iommu_group"))
            .map_err(sys_err("readlink iommu_group"))?;
        let group_id: u32 = link
            .rsplit('/')
            .next()
            .and_then(|g| g.parse().ok())
            .ok_or(VfioError::BadAddress)?;
        let group = self.group(group_id)?;
        let device = FdGuard::new(
            sys,
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
        Ok(MmioBar::new(map, device, group, self.fd.clone()))
    }

    /// The descriptor of group `id`, attached to this container: opened,
    /// checked viable and attached the first time (setting the type1
    /// IOMMU if it is the container's first group), shared after.
    fn group(&self, id: u32) -> Result<Arc<FdGuard>, VfioError> {
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, fd)) = groups.attached.iter().find(|(g, _)| *g == id) {
            return Ok(fd.clone());
        }
        let sys = &self.sys;
        let group = FdGuard::new(
            sys,
            sys.open(&format!("/dev/vfio/{id}"))
                .map_err(sys_err("open group"))?,
        );
        let status = sys
            .group_status(group.fd())
            .map_err(sys_err("VFIO_GROUP_GET_STATUS"))?;
        if status.flags & sys::GROUP_VIABLE == 0 {
            return Err(VfioError::NotViable);
        }
        sys.set_container(group.fd(), self.fd.fd())
            .map_err(sys_err("VFIO_GROUP_SET_CONTAINER"))?;
        if groups.attached.is_empty() {
            sys.ioctl_value(self.fd.fd(), sys::req::SET_IOMMU, sys::TYPE1_IOMMU)
                .map_err(sys_err("VFIO_SET_IOMMU"))?;
        }
        groups.attached.push((id, group.clone()));
        Ok(group)
    }
}
