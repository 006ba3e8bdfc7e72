//! The setup sequence against a double of the VFIO system calls.

use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use std::sync::Mutex;

use super::mapping::Mapping;
use super::sys::{Errno, Fd, GroupStatus, LinuxSys, RegionInfo, VfioSys};
use super::*;
use crate::pcie::hal::{DmaAllocator, DmaRegion, Registers};

const CONFIG_OFFSET: u64 = 0x7_0000_0000;

#[derive(Debug)]
struct Fake {
    calls: Mutex<Vec<String>>,
    config: Mutex<Vec<u8>>,
    next_fd: Mutex<Fd>,
    next_device: Mutex<Fd>,
    not_viable: bool,
    bar_size: u64,
}

impl Fake {
    fn new() -> Arc<Fake> {
        Fake::with(false, 0x4000)
    }
    fn with(not_viable: bool, bar_size: u64) -> Arc<Fake> {
        Arc::new(Fake {
            calls: Mutex::new(Vec::new()),
            config: Mutex::new(alloc::vec![0; 256]),
            next_fd: Mutex::new(10),
            next_device: Mutex::new(99),
            not_viable,
            bar_size,
        })
    }
    fn log(&self, s: String) {
        self.calls.lock().unwrap().push(s);
    }
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl VfioSys for Fake {
    fn open(&self, path: &str) -> Result<Fd, Errno> {
        let mut n = self.next_fd.lock().unwrap();
        *n += 1;
        self.log(format!("open {path} -> {}", *n));
        Ok(*n)
    }
    // The double owns no descriptors, so its `close` only records.
    #[allow(unsafe_code)]
    unsafe fn close(&self, fd: Fd) {
        self.log(format!("close {fd}"));
    }
    /// 0000:00:05.0 is alone in group 8; every other function is in
    /// group 7.
    fn readlink(&self, path: &str) -> Result<String, Errno> {
        self.log(format!("readlink {path}"));
        let group = if path.contains("0000:00:05.0") { 8 } else { 7 };
        Ok(format!("../../../kernel/iommu_groups/{group}"))
    }
    /// BAR0 of 00:04.0 sits at the bottom of the IOVA space, that of
    /// 00:05.0 right after it; 00:06.0's is far away.
    fn read_text(&self, path: &str) -> Result<String, Errno> {
        self.log(format!("read_text {path}"));
        let bar0 = if path.contains("0000:00:04.0") {
            0x1_0000_0000u64
        } else if path.contains("0000:00:05.0") {
            0x1_0000_4000
        } else {
            0xfe00_0000
        };
        Ok(format!(
            "{bar0:#018x} {:#018x} 0x0000000000140204\n{}",
            bar0 + 0x3fff,
            "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
        ))
    }
    fn ioctl_value(&self, fd: Fd, request: u64, arg: u64) -> Result<i32, Errno> {
        self.log(format!("ioctl {fd} {request:#x} {arg}"));
        Ok(if request == sys::req::CHECK_EXTENSION {
            1
        } else {
            0
        })
    }
    fn group_status(&self, group: Fd) -> Result<GroupStatus, Errno> {
        self.log(format!("group_status {group}"));
        Ok(GroupStatus {
            argsz: 8,
            flags: if self.not_viable { 0 } else { 1 },
        })
    }
    fn set_container(&self, group: Fd, container: Fd) -> Result<(), Errno> {
        self.log(format!("set_container {group} {container}"));
        Ok(())
    }
    fn device_fd(&self, group: Fd, name: &str) -> Result<Fd, Errno> {
        self.log(format!("device_fd {group} {name}"));
        let mut n = self.next_device.lock().unwrap();
        let fd = *n;
        *n += 1;
        Ok(fd)
    }
    fn region_info(&self, device: Fd, index: u32) -> Result<RegionInfo, Errno> {
        self.log(format!("region_info {device} {index}"));
        Ok(match index {
            sys::CONFIG_REGION => RegionInfo {
                argsz: 32,
                flags: 3,
                index,
                cap_offset: 0,
                size: 256,
                offset: CONFIG_OFFSET,
            },
            _ => RegionInfo {
                argsz: 32,
                flags: 7,
                index,
                cap_offset: 0,
                size: self.bar_size,
                offset: 0,
            },
        })
    }
    fn pread(&self, _fd: Fd, buf: &mut [u8], offset: u64) -> Result<(), Errno> {
        let at = (offset - CONFIG_OFFSET) as usize;
        buf.copy_from_slice(&self.config.lock().unwrap()[at..at + buf.len()]);
        Ok(())
    }
    fn pwrite(&self, _fd: Fd, buf: &[u8], offset: u64) -> Result<(), Errno> {
        let at = (offset - CONFIG_OFFSET) as usize;
        self.config.lock().unwrap()[at..at + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn map_fd(&self, fd: Fd, offset: u64, len: usize) -> Result<Mapping, Errno> {
        self.log(format!("map_fd {fd} {offset} {len}"));
        LinuxSys.map_anon(len)
    }
    fn map_anon(&self, len: usize) -> Result<Mapping, Errno> {
        LinuxSys.map_anon(len)
    }
    fn dma_map(&self, container: Fd, map: &Mapping, iova: u64) -> Result<(), Errno> {
        self.log(format!("dma_map {container} {iova:#x} {}", map.len()));
        Ok(())
    }
    fn dma_unmap(&self, container: Fd, iova: u64, size: u64) -> Result<(), Errno> {
        self.log(format!("dma_unmap {container} {iova:#x} {size}"));
        Ok(())
    }
}

#[test]
fn setup_follows_the_container_group_device_sequence() {
    let fake = Fake::new();
    fake.config.lock().unwrap()[4] = 0x01; // I/O space already on
    let (bar, dma) = open_with(fake.clone(), "0000:00:04.0").unwrap();
    let calls = fake.calls();
    let want = [
        "open /dev/vfio/vfio -> 11".to_string(),
        format!("ioctl 11 {:#x} 0", sys::req::GET_API_VERSION),
        format!("ioctl 11 {:#x} 1", sys::req::CHECK_EXTENSION),
        "readlink /sys/bus/pci/devices/0000:00:04.0/iommu_group".to_string(),
        "read_text /sys/bus/pci/devices/0000:00:04.0/resource".to_string(),
        "open /dev/vfio/7 -> 12".to_string(),
        "group_status 12".to_string(),
        "set_container 12 11".to_string(),
        format!("ioctl 11 {:#x} 1", sys::req::SET_IOMMU),
        "device_fd 12 0000:00:04.0".to_string(),
        "region_info 99 7".to_string(),
        "region_info 99 0".to_string(),
        "map_fd 99 0 16384".to_string(),
    ];
    assert_eq!(calls, want);
    assert_eq!(
        fake.config.lock().unwrap()[4],
        0x07,
        "memory + bus master on"
    );
    // The BAR mapping is bounds-checked.
    assert_eq!(bar.len(), 0x4000);
    bar.write32(0x14, 1);
    assert_eq!(bar.read32(0x14), 1);
    assert_eq!(bar.read32(0x4000), u32::MAX);
    assert_eq!(bar.read32(0x13), u32::MAX);
    bar.write32(usize::MAX, 5);
    // DMA regions are mapped above 4 GiB, past the BAR's bus addresses,
    // and unmapped on drop.
    let r = dma.alloc(100).unwrap();
    assert_eq!(r.iova().0, 0x1_0000_4000);
    assert_eq!(r.len(), 4096);
    r.write_u32(12, 0xabcd).unwrap();
    assert_eq!(r.read_u32(12).unwrap(), 0xabcd);
    let r2 = dma.alloc(8192).unwrap();
    assert_eq!(r2.iova().0, 0x1_0000_6000);
    drop(r);
    drop(r2);
    drop(bar);
    drop(dma);
    let tail: Vec<String> = fake.calls()[want.len()..].to_vec();
    assert_eq!(tail[0], "dma_map 11 0x100004000 4096");
    assert!(tail.contains(&"dma_unmap 11 0x100004000 4096".to_string()));
    for fd in [99, 12, 11] {
        assert!(tail.contains(&format!("close {fd}")), "fd {fd} closed");
    }
}

#[test]
fn setup_refuses_bad_input_and_closes_what_it_opened() {
    let fake = Fake::new();
    assert_eq!(
        open_with(fake.clone(), "../../etc/pw").err(),
        Some(VfioError::BadAddress)
    );
    assert!(fake.calls().is_empty());
    let fake = Fake::with(true, 0x4000);
    assert_eq!(
        open_with(fake.clone(), "0000:00:04.0").err(),
        Some(VfioError::NotViable)
    );
    let calls = fake.calls();
    assert!(calls.contains(&"close 11".to_string()));
    assert!(calls.contains(&"close 12".to_string()));
    let fake = Fake::with(false, 0x100);
    assert_eq!(
        open_with(fake.clone(), "0000:00:04.0").err(),
        Some(VfioError::Bar0)
    );
    assert!(fake.calls().contains(&"close 99".to_string()));
}

#[test]
fn controllers_of_one_container_share_its_groups_iommu_and_frames() {
    let fake = Fake::new();
    let container = VfioContainer::open_with(fake.clone()).unwrap();
    let a = container.attach("0000:00:04.0").unwrap();
    let b = container.attach("0000:00:05.0").unwrap();
    let frames = container.frames(4).unwrap();
    // A second function of group 7: the group's descriptor is reused.
    // Its BAR is far from the memory handed out so far.
    let c = container.attach("0000:00:06.0").unwrap();
    let calls = fake.calls();
    let count = |prefix: &str| calls.iter().filter(|c| c.starts_with(prefix)).count();
    assert_eq!(count("open /dev/vfio/vfio"), 1, "one container");
    assert_eq!(count("open /dev/vfio/7"), 1, "group 7 opened once");
    assert_eq!(count("open /dev/vfio/8"), 1);
    assert!(calls.contains(&"set_container 12 11".to_string()));
    assert!(calls.contains(&"set_container 13 11".to_string()));
    assert_eq!(count("set_container"), 2);
    let set_iommu = format!("ioctl 11 {:#x} 1", sys::req::SET_IOMMU);
    assert_eq!(
        calls.iter().filter(|c| **c == set_iommu).count(),
        1,
        "the IOMMU is set once, after the first group"
    );
    for (dev, group, pci) in [
        (99, 12, "0000:00:04.0"),
        (100, 13, "0000:00:05.0"),
        (101, 12, "0000:00:06.0"),
    ] {
        assert!(calls.contains(&format!("device_fd {group} {pci}")));
        assert!(calls.contains(&format!("map_fd {dev} 0 16384")));
    }
    // The frames are mapped once, past both controllers' BARs, and
    // queues of every controller come from the same IOVA space after
    // them.
    assert_eq!(count("dma_map"), 1);
    assert!(calls.contains(&"dma_map 11 0x100008000 16384".to_string()));
    assert!(container.holds(&frames));
    let queue = container.dma().alloc(4096).unwrap();
    assert_eq!(queue.iova().0, 0x1_0000_8000 + 16384 + 4096);
    assert!(container.dma().owns(&queue));

    // Frames of another container are refused before any bring-up; a
    // controller whose BAR lies in memory already handed out is refused.
    let other = VfioContainer::open_with(fake.clone()).unwrap();
    let low = other.frames(1).unwrap();
    assert_eq!(low.map().base.0, 1 << 32);
    assert_eq!(
        other.attach("0000:00:04.0").err(),
        Some(VfioError::DmaOverBar)
    );
    drop(low);
    assert!(!other.holds(&frames));
    let err = NvmeDevice::vfio_attached(&other, a, DriverConfig::default(), frames.clone(), || {
        pollfs_core::units::Nanos(0)
    })
    .err();
    assert_eq!(err, Some(VfioError::OtherContainer));

    // Every descriptor is closed once nothing holds it.
    drop((b, c, queue, frames, container, other));
    let calls = fake.calls();
    for fd in [99, 100, 101, 12, 13, 11, 14] {
        let closes = calls
            .iter()
            .filter(|c| **c == format!("close {fd}"))
            .count();
        assert_eq!(closes, 1, "fd {fd} closed once");
    }
}

#[test]
fn a_group_that_is_not_viable_is_not_attached() {
    let fake = Fake::with(true, 0x4000);
    let container = VfioContainer::open_with(fake.clone()).unwrap();
    assert_eq!(
        container.attach("0000:00:04.0").err(),
        Some(VfioError::NotViable)
    );
    assert_eq!(
        container.attach("0000:00:04.0").err(),
        Some(VfioError::NotViable),
        "tried again, not taken from a list"
    );
    assert_eq!(container.attach("04.0").err(), Some(VfioError::BadAddress));
    assert!(!fake.calls().iter().any(|c| c.starts_with("set_container")));
}
