//! The device a filesystem is on, named by the workspace's one device
//! spec (`emu`, `ram`, `file:PATH`, `vfio:ADDR`, `nvme-tcp://..`,
//! `mirror:(..)`, `stripe:..`) and opened by `pollfs-device`'s rules. A
//! device no spec names (a test's recording device) comes in as an
//! `AnyDevice` too, with a filesystem a Rust caller mounted on it
//! ([`crate::embed::into_handle`]).

pub(crate) use by_spec::open_fs;

/// The device type every handle of this library works on.
pub type Dev = pollfs_device::AnyDevice;

/// How to open the filesystem.
#[derive(Clone, Copy, Debug)]
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

mod by_spec {
    use pollfs_core::Fs;
    use pollfs_device::{Access, DeviceSpec, OpenError, OpenErrorKind, OpenOptions};

    use super::{Dev, Opening};
    use crate::error::Fail;

    /// The errno for a device that could not be opened: the device
    /// crate's rule (`OpenErrorKind::errno`), which names every kind and
    /// asks the driver's and the engine's errors for theirs, so no kind
    /// falls into a catch-all here.
    pub(super) fn errno(kind: &OpenErrorKind) -> i32 {
        kind.errno()
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
            ..pollfs_hosted::config()
        };
        pollfs_device::open_fs(&parsed, &options, config).map_err(fail)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use pollfs_core::dev::DevError;
    use pollfs_core::volume::VolumeError as V;
    use pollfs_device::control::server::ServeError;
    use pollfs_device::signature::Found;
    use pollfs_device::{Arenas, DeviceSpec, DriverFault, OpenErrorKind as K};
    use pollfs_driver::error::Stage;
    use pollfs_driver::pcie::hal::DmaError;
    #[cfg(target_os = "linux")]
    use pollfs_driver::pcie::vfio::VfioError;
    use pollfs_driver::qpair::ProtocolError;
    use pollfs_driver::spec::identify::IdentifyError;
    use pollfs_driver::spec::status::{specific, Status, StatusType};
    use pollfs_driver::tcp::{LinkError, TcpError};
    use pollfs_driver::transport::QpairError;
    use pollfs_driver::DriverError;

    use super::by_spec::errno;

    fn driver(error: DriverError<DmaError>) -> K {
        K::Driver {
            error: DriverFault::Pcie(error),
            hint: None,
        }
    }

    fn tcp(error: DriverError<TcpError>) -> K {
        K::Driver {
            error: DriverFault::Tcp(error),
            hint: None,
        }
    }

    #[cfg(target_os = "linux")]
    fn vfio(error: VfioError) -> K {
        K::Driver {
            error: DriverFault::Vfio(error),
            hint: Some("a hint".into()),
        }
    }

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
            (driver(DriverError::Timeout(Stage::Enable)), libc::ETIMEDOUT),
            (driver(DriverError::Timeout(Stage::Admin)), libc::ETIMEDOUT),
            (driver(DriverError::DeviceGone), libc::ENODEV),
            (driver(DriverError::Fatal), libc::EIO),
            (driver(DriverError::Dead), libc::EIO),
            (driver(DriverError::NoQueues), libc::EBUSY),
            (driver(DriverError::Unsupported("MPS")), libc::EOPNOTSUPP),
            (
                driver(DriverError::Identify(IdentifyError::Length)),
                libc::EPROTO,
            ),
            (
                driver(DriverError::Admin {
                    opcode: 6,
                    status: Status::new(StatusType::Generic, 0x04, false),
                }),
                libc::EIO,
            ),
            (
                driver(DriverError::Admin {
                    opcode: 1,
                    status: Status::new(StatusType::CommandSpecific, specific::INVALID_QID, true),
                }),
                libc::EBUSY,
            ),
            (
                driver(DriverError::Transport(DmaError::NoMemory)),
                libc::ENOMEM,
            ),
            (
                driver(DriverError::Protocol(ProtocolError::UnknownCid(3))),
                libc::EPROTO,
            ),
            (driver(DriverError::Qpair(QpairError::Full)), libc::EAGAIN),
            (
                tcp(DriverError::Transport(TcpError::Link(LinkError::Refused))),
                libc::ECONNREFUSED,
            ),
            (
                tcp(DriverError::Transport(TcpError::Link(LinkError::Reset))),
                libc::ECONNRESET,
            ),
            (
                tcp(DriverError::Transport(TcpError::SetupTimeout)),
                libc::ETIMEDOUT,
            ),
            (
                tcp(DriverError::Transport(TcpError::Terminated { fes: 1 })),
                libc::ECONNABORTED,
            ),
            (
                tcp(DriverError::Transport(TcpError::HeaderDigest { pdu: 5 })),
                libc::EPROTO,
            ),
            (
                K::Driver {
                    error: DriverFault::Device(DevError::InvalidRequest),
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
            (K::Volume(V::NotAMirror { leg: 1 }), libc::EUCLEAN),
            (K::Volume(V::NoLegInSync), libc::EUCLEAN),
            (
                K::Volume(V::NewerFormat { leg: 0, version: 9 }),
                libc::EOPNOTSUPP,
            ),
            (K::Volume(V::NoSuchLeg), libc::ENOENT),
            (K::Volume(V::ReadOnly), libc::EROFS),
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
            (K::Control(ServeError::Nowhere(Vec::new())), libc::ENOENT),
            (
                K::Control(ServeError::Nowhere(vec![(
                    "/run/x".into(),
                    std::io::Error::from_raw_os_error(libc::EROFS),
                )])),
                libc::EROFS,
            ),
        ];
        for (kind, want) in &cases {
            assert_eq!(errno(kind), *want, "{kind:?}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn vfio_errors_keep_their_errno() {
        let cases = [
            (
                vfio(VfioError::Sys {
                    call: "open",
                    errno: libc::EACCES,
                }),
                libc::EACCES,
            ),
            (vfio(VfioError::NotViable), libc::EBUSY),
            (
                vfio(VfioError::Driver(DriverError::DeviceGone)),
                libc::ENODEV,
            ),
        ];
        for (kind, want) in &cases {
            assert_eq!(errno(kind), *want, "{kind:?}");
        }
    }
}
