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

    /// The errno for a device that could not be opened. Every kind is
    /// named; `OpenErrorKind` is `#[non_exhaustive]`, so the last arm
    /// cannot be avoided: a kind added after this was written is `EIO`
    /// until it is named here (and in the test over every kind).
    pub(super) fn errno(kind: &OpenErrorKind) -> i32 {
        use pollfs_core::volume::VolumeError as V;
        use pollfs_device::control::server::ServeError;
        match kind {
            OpenErrorKind::Spec(_) => libc::EINVAL,
            OpenErrorKind::NoSuchFile => libc::ENOENT,
            OpenErrorKind::File(e) => e.raw_os_error().unwrap_or(libc::EIO),
            OpenErrorKind::InUse => libc::EBUSY,
            OpenErrorKind::HoldsData(_) => libc::EEXIST,
            OpenErrorKind::TooSmall { .. } => libc::ENOSPC,
            OpenErrorKind::SizeFixed { .. } => libc::EINVAL,
            OpenErrorKind::NothingThere => libc::ENODEV,
            OpenErrorKind::Fs(e) => crate::error::errno(e),
            OpenErrorKind::NoVfio => libc::ENODEV,
            OpenErrorKind::NamedTwice => libc::EINVAL,
            // The controller did not come up: the device failed.
            OpenErrorKind::Driver { .. } => libc::EIO,
            OpenErrorKind::Arenas(_) => libc::EINVAL,
            OpenErrorKind::Volume(V::Leg { .. }) => libc::EIO,
            OpenErrorKind::Volume(V::TooSmall) => libc::ENOSPC,
            OpenErrorKind::Volume(
                V::NoLegs
                | V::TooManyLegs
                | V::ArenasDiffer
                | V::BlockSizesDiffer
                | V::ChunkSize
                | V::TooFewFrames
                | V::NoFua { .. },
            ) => libc::EINVAL,
            // Another process serves the mirror's control socket.
            OpenErrorKind::Control(ServeError::Live(_)) => libc::EBUSY,
            OpenErrorKind::Control(ServeError::Nowhere(_)) => libc::EIO,
            // A kind newer than this function (see above).
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

#[cfg(all(test, not(feature = "crash-test")))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use pollfs_core::dev::DevError;
    use pollfs_core::volume::VolumeError as V;
    use pollfs_device::control::server::ServeError;
    use pollfs_device::signature::Found;
    use pollfs_device::{Arenas, DeviceSpec, OpenErrorKind as K};

    use super::by_spec::errno;

    #[test]
    fn every_open_error_kind_has_its_errno() {
        let spec = DeviceSpec::parse("no-such-kind:x").unwrap_err();
        let fs = pollfs_core::Error::from(pollfs_core::error::NamespaceError::NotFound);
        let cases = [
            (K::Spec(spec), libc::EINVAL),
            (K::NoSuchFile, libc::ENOENT),
            (
                K::File(std::io::Error::from_raw_os_error(libc::EACCES)),
                libc::EACCES,
            ),
            (K::File(std::io::Error::other("no code")), libc::EIO),
            (K::InUse, libc::EBUSY),
            (K::HoldsData(Found::Pollfs), libc::EEXIST),
            (K::TooSmall { bytes: 1, min: 2 }, libc::ENOSPC),
            (K::SizeFixed { bytes: None }, libc::EINVAL),
            (K::NothingThere, libc::ENODEV),
            (
                K::Driver {
                    error: "down".into(),
                    hint: None,
                },
                libc::EIO,
            ),
            (K::Arenas(Arenas::TcpWithDma), libc::EINVAL),
            (K::Arenas(Arenas::EmuWithVfio), libc::EINVAL),
            (K::Volume(V::NoLegs), libc::EINVAL),
            (K::Volume(V::TooManyLegs), libc::EINVAL),
            (K::Volume(V::ArenasDiffer), libc::EINVAL),
            (K::Volume(V::BlockSizesDiffer), libc::EINVAL),
            (K::Volume(V::ChunkSize), libc::EINVAL),
            (K::Volume(V::TooSmall), libc::ENOSPC),
            (K::Volume(V::TooFewFrames), libc::EINVAL),
            (K::Volume(V::NoFua { leg: 1 }), libc::EINVAL),
            (
                K::Volume(V::Leg {
                    leg: 0,
                    error: DevError::InvalidRequest,
                }),
                libc::EIO,
            ),
            (K::Fs(fs), libc::ENOENT),
            (K::NoVfio, libc::ENODEV),
            (K::NamedTwice, libc::EINVAL),
            (K::Control(ServeError::Live("/s".into())), libc::EBUSY),
            (K::Control(ServeError::Nowhere(Vec::new())), libc::EIO),
        ];
        for (kind, want) in &cases {
            assert_eq!(errno(kind), *want, "{kind:?}");
        }
    }
}
