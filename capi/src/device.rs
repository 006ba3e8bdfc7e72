//! The device a filesystem is on, named by the workspace's one device
//! spec (`emu`, `ram`, `file:PATH`, `vfio:ADDR`, `nvme-tcp://..`,
//! `mirror:(..)`, `stripe:..`) and opened by `pollfs-device`'s rules.
//!
//! Built with the `crash-test` feature, the device is instead host-tests'
//! recording RAM device, and filesystems come only through
//! [`crate::crash::into_handle`]: device specs are refused.

#[cfg(feature = "crash-test")]
use {crate::error::Fail, pollfs_core::Fs};

#[cfg(not(feature = "crash-test"))]
pub(crate) use by_spec::open_fs;

/// The device type every handle of this library works on.
#[cfg(not(feature = "crash-test"))]
pub type Dev = pollfs_device::AnyDevice;
/// The device type every handle of this library works on.
#[cfg(feature = "crash-test")]
pub type Dev = pollfs_host_tests::crash::RecordingDevice;

/// How to open the filesystem.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "crash-test", allow(dead_code))]
pub(crate) struct Opening {
    /// Page-cache pages.
    pub cache_pages: u32,
    /// Size of in-memory devices and of files made here; 0 for the
    /// default.
    pub size: u64,
    /// Make a new filesystem (a device in memory always gets one).
    pub format: bool,
    /// Format over a device that holds something.
    pub force: bool,
}

/// Opens the device `spec` names and formats or mounts the filesystem.
#[cfg(feature = "crash-test")]
pub(crate) fn open_fs(spec: &str, _how: Opening) -> Result<Fs<Dev>, Fail> {
    Err(Fail::new(
        libc::ENODEV,
        format!("{spec}: this build (crash-test) takes filesystems from crash::into_handle only"),
    ))
}

#[cfg(not(feature = "crash-test"))]
mod by_spec {
    use pollfs_core::{hosted, Fs};
    use pollfs_device::{Access, DeviceSpec, OpenError, OpenErrorKind, OpenOptions};

    use super::{Dev, Opening};
    use crate::error::Fail;

    /// The errno for a device that could not be opened.
    fn errno(kind: &OpenErrorKind) -> i32 {
        match kind {
            OpenErrorKind::Spec(_) => libc::EINVAL,
            OpenErrorKind::NoSuchFile => libc::ENOENT,
            OpenErrorKind::File(e) => e.raw_os_error().unwrap_or(libc::EIO),
            OpenErrorKind::InUse => libc::EBUSY,
            OpenErrorKind::HoldsData(_) => libc::EEXIST,
            OpenErrorKind::TooSmall { .. } => libc::ENOSPC,
            OpenErrorKind::SizeFixed { .. } => libc::EINVAL,
            OpenErrorKind::NothingThere => libc::ENODEV,
            OpenErrorKind::Fs(e) => e.errno().unwrap_or(libc::EIO),
            OpenErrorKind::NoVfio => libc::ENODEV,
            OpenErrorKind::NamedTwice => libc::EINVAL,
            _ => libc::EIO,
        }
    }

    fn fail(e: OpenError) -> Fail {
        Fail::new(errno(&e.kind), e.to_string())
    }

    /// Opens the device `spec` names and formats or mounts the filesystem.
    pub(crate) fn open_fs(spec: &str, how: Opening) -> Result<Fs<Dev>, Fail> {
        let parsed = DeviceSpec::parse(spec)
            .map_err(|e| Fail::inval(format!("device spec {spec:?}: {e}")))?;
        let frames = how
            .cache_pages
            .checked_add(pollfs_core::persist::META_FRAMES)
            .ok_or_else(|| Fail::inval(format!("cache_pages {} is too large", how.cache_pages)))?;
        let access = if how.format {
            Access::Format { force: how.force }
        } else {
            Access::Write
        };
        let mut options = OpenOptions::new(access, frames);
        if how.size != 0 {
            options.size = how.size;
        }
        options.create = how.format;
        let config = pollfs_core::Config {
            cache_pages: how.cache_pages,
            ..hosted::config()
        };
        pollfs_device::open_fs(&parsed, &options, config).map_err(fail)
    }
}
