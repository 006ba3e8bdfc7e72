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
//! A controller's BARs have bus addresses; a DMA address equal to one may
//! never reach the IOMMU (a peer-to-peer access), so each attached
//! controller's BAR ranges are kept out of the IOVAs handed out.
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

/// `IORESOURCE_MEM`: a memory range in the flags of sysfs's `resource`.
const IORESOURCE_MEM: u64 = 0x200;

/// The bus address ranges (half-open) of a device's memory BARs, from its
/// sysfs `resource` file: `0xSTART 0xEND 0xFLAGS` a line, END inclusive,
/// zeros for an unused BAR. `None` if a line is not three hex numbers.
fn memory_bars(text: &str) -> Option<Vec<(u64, u64)>> {
    let mut bars = Vec::new();
    for line in text.lines() {
        let mut words = line
            .split_whitespace()
            .map(|w| u64::from_str_radix(w.strip_prefix("0x")?, 16).ok());
        let (start, end, flags) = (words.next()??, words.next()??, words.next()??);
        if flags & IORESOURCE_MEM != 0 && end > start {
            bars.push((start, end.checked_add(1)?));
        }
    }
    Some(bars)
}

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
    /// bound to vfio-pci): its BARs' bus addresses are kept out of the
    /// container's IOVAs, its IOMMU group joins the container, memory
    /// decoding and bus mastering are turned on in PCI config space
    /// (vfio-pci leaves bus mastering off), and BAR0 is mapped. Attach
    /// every controller before allocating DMA memory: a BAR inside memory
    /// already handed out is refused.
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
        let resources = sys
            .read_text(&format!("/sys/bus/pci/devices/{pci}/resource"))
            .map_err(sys_err("read PCI resources"))?;
        for (start, end) in memory_bars(&resources).ok_or(VfioError::BarAddresses)? {
            if !self.dma.reserve(start, end) {
                return Err(VfioError::DmaOverBar);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::memory_bars;

    #[test]
    fn memory_bars_come_from_the_sysfs_resource_lines() {
        let text = "0x0000000100000000 0x0000000100003fff 0x0000000000140204\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                    0x000000000000c000 0x000000000000c03f 0x0000000000040101\n\
                    0x00000000fe000000 0x00000000fe000fff 0x0000000000040200\n";
        assert_eq!(
            memory_bars(text),
            Some(vec![
                (0x1_0000_0000, 0x1_0000_4000),
                (0xfe00_0000, 0xfe00_1000)
            ]),
            "I/O ports and unused BARs are left out"
        );
        assert_eq!(memory_bars(""), Some(vec![]));
        assert_eq!(memory_bars("0x1 0x2"), None);
        assert_eq!(memory_bars("1000 2000 200"), None);
        assert_eq!(memory_bars("0x0 0xffffffffffffffff 0x200"), None);
    }
}
