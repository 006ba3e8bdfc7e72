//! The VFIO system calls (Linux `include/uapi/linux/vfio.h`, type1 IOMMU)
//! behind a trait, so the setup sequence above can be tested with a double.
//! The second leaf module with unsafe code.
#![allow(unsafe_code)]

use alloc::string::String;
use core::mem::size_of;
use core::ptr::NonNull;
use std::ffi::{CStr, CString};

use alloc::sync::Arc;

use super::mapping::Mapping;

/// A raw file descriptor.
pub type Fd = i32;

/// An `errno` value from a failed call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

/// `VFIO_API_VERSION`.
pub const API_VERSION: i32 = 0;
/// `VFIO_TYPE1_IOMMU`.
pub const TYPE1_IOMMU: u64 = 1;
/// `VFIO_GROUP_FLAGS_VIABLE`: every device of the group is bound to VFIO.
pub const GROUP_VIABLE: u32 = 1;
/// `VFIO_REGION_INFO_FLAG_MMAP`.
pub const REGION_MMAP: u32 = 1 << 2;
/// `VFIO_PCI_BAR0_REGION_INDEX`.
pub const BAR0_REGION: u32 = 0;
/// `VFIO_PCI_CONFIG_REGION_INDEX`.
pub const CONFIG_REGION: u32 = 7;
/// `VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE`.
const DMA_READ_WRITE: u32 = 0b11;

/// `_IO(';', 100 + nr)`: VFIO encodes no size or direction in its requests.
const fn vfio_io(nr: u64) -> u64 {
    ((b';' as u64) << 8) | (100 + nr)
}

/// Request numbers.
pub mod req {
    use super::vfio_io;
    /// `VFIO_GET_API_VERSION`
    pub const GET_API_VERSION: u64 = vfio_io(0);
    /// `VFIO_CHECK_EXTENSION`
    pub const CHECK_EXTENSION: u64 = vfio_io(1);
    /// `VFIO_SET_IOMMU`
    pub const SET_IOMMU: u64 = vfio_io(2);
    /// `VFIO_GROUP_GET_STATUS`
    pub const GROUP_GET_STATUS: u64 = vfio_io(3);
    /// `VFIO_GROUP_SET_CONTAINER`
    pub const GROUP_SET_CONTAINER: u64 = vfio_io(4);
    /// `VFIO_GROUP_GET_DEVICE_FD`
    pub const GROUP_GET_DEVICE_FD: u64 = vfio_io(6);
    /// `VFIO_DEVICE_GET_REGION_INFO`
    pub const DEVICE_GET_REGION_INFO: u64 = vfio_io(8);
    /// `VFIO_IOMMU_MAP_DMA`
    pub const IOMMU_MAP_DMA: u64 = vfio_io(13);
    /// `VFIO_IOMMU_UNMAP_DMA`
    pub const IOMMU_UNMAP_DMA: u64 = vfio_io(14);
}

/// `struct vfio_group_status`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupStatus {
    /// Size of this structure.
    pub argsz: u32,
    /// `VFIO_GROUP_FLAGS_*`.
    pub flags: u32,
}

/// `struct vfio_region_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionInfo {
    /// Size of this structure.
    pub argsz: u32,
    /// `VFIO_REGION_INFO_FLAG_*`.
    pub flags: u32,
    /// Region index.
    pub index: u32,
    /// Offset of the first capability.
    pub cap_offset: u32,
    /// Region size in bytes.
    pub size: u64,
    /// Region offset within the device fd.
    pub offset: u64,
}

/// `struct vfio_iommu_type1_dma_map`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct DmaMap {
    argsz: u32,
    flags: u32,
    vaddr: u64,
    iova: u64,
    size: u64,
}

/// `struct vfio_iommu_type1_dma_unmap` (without the bitmap tail).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct DmaUnmap {
    argsz: u32,
    flags: u32,
    iova: u64,
    size: u64,
}

const _: () = assert!(size_of::<GroupStatus>() == 8);
const _: () = assert!(size_of::<RegionInfo>() == 32);
const _: () = assert!(size_of::<DmaMap>() == 32);
const _: () = assert!(size_of::<DmaUnmap>() == 24);

/// The calls the VFIO backend makes.
pub trait VfioSys: Send + Sync + core::fmt::Debug {
    /// `open(path, O_RDWR | O_CLOEXEC)`.
    fn open(&self, path: &str) -> Result<Fd, Errno>;
    /// `close(fd)`.
    ///
    /// # Safety
    /// `fd` must be a descriptor the caller owns (opened through this trait)
    /// and must not be used again.
    unsafe fn close(&self, fd: Fd);
    /// `readlink(path)`.
    fn readlink(&self, path: &str) -> Result<String, Errno>;
    /// The whole of a (sysfs) text file.
    fn read_text(&self, path: &str) -> Result<String, Errno>;
    /// An ioctl whose argument is an integer (or absent).
    fn ioctl_value(&self, fd: Fd, request: u64, arg: u64) -> Result<i32, Errno>;
    /// `VFIO_GROUP_GET_STATUS`.
    fn group_status(&self, group: Fd) -> Result<GroupStatus, Errno>;
    /// `VFIO_GROUP_SET_CONTAINER`.
    fn set_container(&self, group: Fd, container: Fd) -> Result<(), Errno>;
    /// `VFIO_GROUP_GET_DEVICE_FD` for a PCI address.
    fn device_fd(&self, group: Fd, name: &str) -> Result<Fd, Errno>;
    /// `VFIO_DEVICE_GET_REGION_INFO`.
    fn region_info(&self, device: Fd, index: u32) -> Result<RegionInfo, Errno>;
    /// `pread` of exactly `buf.len()` bytes.
    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> Result<(), Errno>;
    /// `pwrite` of exactly `buf.len()` bytes.
    fn pwrite(&self, fd: Fd, buf: &[u8], offset: u64) -> Result<(), Errno>;
    /// Maps `len` bytes of `fd` at `offset`, shared, read-write.
    fn map_fd(&self, fd: Fd, offset: u64, len: usize) -> Result<Mapping, Errno>;
    /// Maps at least `len` bytes of zeroed anonymous shared memory,
    /// populated (more when rounded up to hugepages).
    fn map_anon(&self, len: usize) -> Result<Mapping, Errno>;
    /// `VFIO_IOMMU_MAP_DMA` of the whole of `map` at `iova`, readable and
    /// writable by the device. Only a [`Mapping`] can be given to the
    /// device, never arbitrary process memory: a mapping is reached from
    /// Rust only through atomic words, so device writes cannot break what
    /// the compiler assumes about ordinary memory. The kernel pins the
    /// pages until `dma_unmap`, even if the mapping is dropped first.
    fn dma_map(&self, container: Fd, map: &Mapping, iova: u64) -> Result<(), Errno>;
    /// `VFIO_IOMMU_UNMAP_DMA`.
    fn dma_unmap(&self, container: Fd, iova: u64, size: u64) -> Result<(), Errno>;
}

/// An open file descriptor, closed on drop. Only this crate creates them,
/// from descriptors it has just opened.
#[derive(Debug)]
pub struct FdGuard {
    sys: Arc<dyn VfioSys>,
    fd: Fd,
}

impl FdGuard {
    /// Takes ownership of `fd`, freshly returned by `sys`.
    pub(super) fn new(sys: &Arc<dyn VfioSys>, fd: Fd) -> Arc<FdGuard> {
        Arc::new(FdGuard {
            sys: sys.clone(),
            fd,
        })
    }
    /// The raw descriptor.
    pub fn fd(&self) -> Fd {
        self.fd
    }
}

impl Drop for FdGuard {
    fn drop(&mut self) {
        // SAFETY: guards are only built from descriptors just opened
        // through `sys` and owned by nothing else; this is the last use.
        unsafe { self.sys.close(self.fd) };
    }
}

/// The real calls.
#[derive(Clone, Copy, Debug, Default)]
pub struct LinuxSys;

fn errno() -> Errno {
    Errno(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    )
}

fn check(ret: libc::c_int) -> Result<i32, Errno> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(ret)
    }
}

fn c_string(s: &str) -> Result<CString, Errno> {
    CString::new(s).map_err(|_| Errno(libc::EINVAL))
}

fn map(fd: Fd, offset: u64, len: usize, flags: libc::c_int) -> Result<Mapping, Errno> {
    let off = libc::off_t::try_from(offset).map_err(|_| Errno(libc::EINVAL))?;
    if len == 0 {
        return Err(Errno(libc::EINVAL));
    }
    // SAFETY: a fresh mapping chosen by the kernel (no fixed address), so
    // no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            off,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    let ptr = NonNull::new(p.cast::<u8>()).ok_or(Errno(libc::ENOMEM))?;
    // SAFETY: `ptr..ptr+len` was just mapped read-write and is owned by
    // nothing else.
    Ok(unsafe { Mapping::from_raw(ptr, len) })
}

impl VfioSys for LinuxSys {
    fn open(&self, path: &str) -> Result<Fd, Errno> {
        let c = c_string(path)?;
        // SAFETY: `c` is a valid NUL-terminated string for the call.
        check(unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })
    }
    unsafe fn close(&self, fd: Fd) {
        // SAFETY: the caller owns `fd` and never uses it again.
        unsafe { libc::close(fd) };
    }
    fn readlink(&self, path: &str) -> Result<String, Errno> {
        let target =
            std::fs::read_link(path).map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
        Ok(target.to_string_lossy().into_owned())
    }
    fn read_text(&self, path: &str) -> Result<String, Errno> {
        std::fs::read_to_string(path).map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))
    }
    fn ioctl_value(&self, fd: Fd, request: u64, arg: u64) -> Result<i32, Errno> {
        // SAFETY: the VFIO requests used with this call take an integer
        // argument (or none), so no memory is passed to the kernel.
        check(unsafe { libc::ioctl(fd, request as _, arg as libc::c_ulong) })
    }
    fn group_status(&self, group: Fd) -> Result<GroupStatus, Errno> {
        let mut st = GroupStatus {
            argsz: size_of::<GroupStatus>() as u32,
            flags: 0,
        };
        // SAFETY: `st` is a live `struct vfio_group_status` with argsz set.
        check(unsafe { libc::ioctl(group, req::GROUP_GET_STATUS as _, &mut st) })?;
        Ok(st)
    }
    fn set_container(&self, group: Fd, container: Fd) -> Result<(), Errno> {
        let c: libc::c_int = container;
        // SAFETY: the request reads one `int` through the pointer.
        check(unsafe { libc::ioctl(group, req::GROUP_SET_CONTAINER as _, &c) }).map(|_| ())
    }
    fn device_fd(&self, group: Fd, name: &str) -> Result<Fd, Errno> {
        let c = c_string(name)?;
        let p: &CStr = &c;
        // SAFETY: the request reads a NUL-terminated string.
        check(unsafe { libc::ioctl(group, req::GROUP_GET_DEVICE_FD as _, p.as_ptr()) })
    }
    fn region_info(&self, device: Fd, index: u32) -> Result<RegionInfo, Errno> {
        let mut info = RegionInfo {
            argsz: size_of::<RegionInfo>() as u32,
            index,
            ..RegionInfo::default()
        };
        // SAFETY: `info` is a live `struct vfio_region_info` with argsz set.
        check(unsafe { libc::ioctl(device, req::DEVICE_GET_REGION_INFO as _, &mut info) })?;
        Ok(info)
    }
    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> Result<(), Errno> {
        let off = libc::off_t::try_from(offset).map_err(|_| Errno(libc::EINVAL))?;
        // SAFETY: `buf` is valid for `buf.len()` bytes of writes.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off) };
        if n < 0 {
            return Err(errno());
        }
        if n as usize != buf.len() {
            return Err(Errno(libc::EIO));
        }
        Ok(())
    }
    fn pwrite(&self, fd: Fd, buf: &[u8], offset: u64) -> Result<(), Errno> {
        let off = libc::off_t::try_from(offset).map_err(|_| Errno(libc::EINVAL))?;
        // SAFETY: `buf` is valid for `buf.len()` bytes of reads.
        let n = unsafe { libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), off) };
        if n < 0 {
            return Err(errno());
        }
        if n as usize != buf.len() {
            return Err(Errno(libc::EIO));
        }
        Ok(())
    }
    fn map_fd(&self, fd: Fd, offset: u64, len: usize) -> Result<Mapping, Errno> {
        map(fd, offset, len, libc::MAP_SHARED)
    }
    fn map_anon(&self, len: usize) -> Result<Mapping, Errno> {
        let flags = libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        // Large regions (the page-cache arena) from 2 MiB hugepages when
        // the pool has enough: fewer pages to pin and fewer IOTLB entries.
        // A shared hugetlb mapping reserves its pages at mmap time, so an
        // empty pool fails here and not at first touch.
        const HUGE: usize = 2 << 20;
        if len >= HUGE {
            if let Some(rounded) = len.checked_next_multiple_of(HUGE) {
                if let Ok(m) = map(-1, 0, rounded, flags | libc::MAP_HUGETLB) {
                    return Ok(m);
                }
            }
        }
        map(-1, 0, len, flags)
    }
    fn dma_map(&self, container: Fd, map: &Mapping, iova: u64) -> Result<(), Errno> {
        let m = DmaMap {
            argsz: size_of::<DmaMap>() as u32,
            flags: DMA_READ_WRITE,
            vaddr: map.addr(),
            iova,
            size: map.len() as u64,
        };
        // SAFETY: `m` is a live `struct vfio_iommu_type1_dma_map` naming a
        // whole `Mapping`, memory Rust reaches only through atomic words;
        // the kernel pins its pages until they are unmapped from the IOMMU.
        check(unsafe { libc::ioctl(container, req::IOMMU_MAP_DMA as _, &m) }).map(|_| ())
    }
    fn dma_unmap(&self, container: Fd, iova: u64, size: u64) -> Result<(), Errno> {
        let mut u = DmaUnmap {
            argsz: size_of::<DmaUnmap>() as u32,
            flags: 0,
            iova,
            size,
        };
        // SAFETY: `u` is a live `struct vfio_iommu_type1_dma_unmap` with no
        // bitmap requested.
        check(unsafe { libc::ioctl(container, req::IOMMU_UNMAP_DMA as _, &mut u) }).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_match_the_uapi_header() {
        assert_eq!(req::GET_API_VERSION, 0x3b64);
        assert_eq!(req::GROUP_GET_DEVICE_FD, 0x3b6a);
        assert_eq!(req::DEVICE_GET_REGION_INFO, 0x3b6c);
        assert_eq!(req::IOMMU_MAP_DMA, 0x3b71);
        assert_eq!(req::IOMMU_UNMAP_DMA, 0x3b72);
    }

    #[test]
    fn anonymous_mappings_are_bounds_checked() {
        let m = LinuxSys.map_anon(8192).unwrap();
        assert_eq!(m.len(), 8192);
        assert_eq!(m.addr() % 4096, 0);
        m.mmio_write32(4, 0xdead_beef).unwrap();
        assert_eq!(m.mmio_read32(4).unwrap(), 0xdead_beef);
        assert!(m.mmio_read32(8190).is_err());
        assert!(m.mmio_read32(2).is_err(), "misaligned");
        assert!(m.mmio_read32(usize::MAX - 3).is_err());
        let mut buf = [0u8; 16];
        m.write(8180, &[7; 12]).unwrap();
        assert!(m.read(8185, &mut buf).is_err());
        m.read(8176, &mut buf).unwrap();
        assert_eq!(&buf[4..], &[7; 12]);
        m.fill(0, 8192, 1).unwrap();
        assert!(m.fill(1, 8192, 1).is_err());
        assert!(LinuxSys.open("/nonexistent/vfio").is_err());
    }
}
