//! [`OpenError`]: why a device could not be opened, one kind per mistake,
//! each message naming the device and what to do about it.

use std::fmt;

use pollfs_core::dev::DevError;
use pollfs_core::volume::VolumeError;
use pollfs_driver::pcie::hal::DmaError;
#[cfg(target_os = "linux")]
use pollfs_driver::pcie::vfio::VfioError;
use pollfs_driver::tcp::TcpError;
use pollfs_driver::{DriverError, Errno};

use crate::signature::Found;
use crate::spec::SpecError;
use crate::units::show_bytes;

/// Why a device (or the filesystem on it) could not be opened: the device
/// or leg, by name, and what went wrong.
#[derive(Debug)]
pub struct OpenError {
    /// The device or leg, as named (`file:/x`, `mirror:(..)`).
    pub device: String,
    /// What went wrong.
    pub kind: OpenErrorKind,
}

/// What went wrong opening a device.
#[derive(Debug)]
#[non_exhaustive]
pub enum OpenErrorKind {
    /// The name did not parse.
    Spec(SpecError),
    /// A `file:` device that does not exist (and was not to be created).
    NoSuchFile,
    /// The file could not be looked at, made, or opened.
    File(std::io::Error),
    /// Another pollfs process has the device file open.
    InUse,
    /// Formatting would overwrite what the device holds.
    HoldsData(Found),
    /// Too small for a pollfs filesystem.
    TooSmall {
        /// The device's size.
        bytes: u64,
        /// The least a filesystem needs.
        min: u64,
    },
    /// A size was given for a device whose size is fixed (an existing
    /// file, a controller's namespace).
    SizeFixed {
        /// The device's size, where known.
        bytes: Option<u64>,
    },
    /// Reading a filesystem from a device that lives in memory: it is new
    /// and empty each time it is opened.
    NothingThere,
    /// The driver could not bring the controller up.
    Driver {
        /// What the driver said, with its kind (NVMe status, the step that
        /// timed out, a device gone from the bus) kept for callers that
        /// branch on it.
        error: DriverFault,
        /// How to fix the usual causes, where known.
        hint: Option<String>,
    },
    /// A volume whose legs cannot share one frame arena.
    Arenas(Arenas),
    /// The volume could not be put together.
    Volume(VolumeError),
    /// The filesystem on it could not be formatted or mounted.
    Fs(pollfs_core::Error),
    /// VFIO on a system without it.
    NoVfio,
    /// One controller named as two legs of a volume.
    NamedTwice,
    /// The mirror's control socket could not be served.
    Control(crate::control::server::ServeError),
    /// An NVMe/TCP device's DH-HMAC-CHAP key file could not be read or
    /// holds no valid secret (the message names the file, never what is
    /// in it).
    KeyFile(pollfs_driver::auth::keyfile::KeyFileError),
}

/// What the driver (or the device under it) said when a device could not
/// be brought up, at its own type: one variant per error type the open
/// meets, so no layer above turns it into text before the door that shows
/// it (the C library's errno branches on it).
#[derive(Debug)]
#[non_exhaustive]
pub enum DriverFault {
    /// A PCIe controller (emulated, or its DMA memory) failed a step.
    Pcie(DriverError<DmaError>),
    /// An NVMe/TCP controller failed a step, or its connection did.
    Tcp(DriverError<TcpError>),
    /// Taking a controller through VFIO failed (Linux).
    #[cfg(target_os = "linux")]
    Vfio(VfioError),
    /// The device refused a request of the open itself (reading its first
    /// blocks, a RAM device of an impossible size).
    Device(DevError),
}

impl fmt::Display for DriverFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverFault::Pcie(e) => write!(f, "{e}"),
            DriverFault::Tcp(e) => write!(f, "{e}"),
            #[cfg(target_os = "linux")]
            DriverFault::Vfio(e) => write!(f, "{e}"),
            DriverFault::Device(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for DriverFault {}

impl Errno for DriverFault {
    fn errno(&self) -> i32 {
        match self {
            DriverFault::Pcie(e) => e.errno(),
            DriverFault::Tcp(e) => e.errno(),
            #[cfg(target_os = "linux")]
            DriverFault::Vfio(e) => e.errno(),
            // The engine's own rule for a device's refusal (an I/O error).
            DriverFault::Device(e) => pollfs_core::Error::Io(*e).errno().unwrap_or(libc::EIO),
        }
    }
}

impl From<DriverError<DmaError>> for DriverFault {
    fn from(e: DriverError<DmaError>) -> DriverFault {
        DriverFault::Pcie(e)
    }
}

impl From<DriverError<TcpError>> for DriverFault {
    fn from(e: DriverError<TcpError>) -> DriverFault {
        DriverFault::Tcp(e)
    }
}

#[cfg(target_os = "linux")]
impl From<VfioError> for DriverFault {
    fn from(e: VfioError) -> DriverFault {
        DriverFault::Vfio(e)
    }
}

impl From<DevError> for DriverFault {
    fn from(e: DevError) -> DriverFault {
        DriverFault::Device(e)
    }
}

/// Mixes of legs that cannot share one frame arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Arenas {
    /// `nvme-tcp` legs with `emu` or `vfio` legs.
    TcpWithDma,
    /// `emu` legs with `vfio` legs.
    EmuWithVfio,
}

impl OpenErrorKind {
    /// The errno that says what went wrong, for doors that speak errno
    /// (the C library). Every kind is matched here, where the enum is
    /// defined, so a kind added later does not compile until it has one;
    /// the errors it carries answer by their own crates' rules.
    pub fn errno(&self) -> i32 {
        use crate::control::server::ServeError;
        match self {
            OpenErrorKind::Spec(_) => libc::EINVAL,
            OpenErrorKind::NoSuchFile => libc::ENOENT,
            // An `io::Error` made without an OS code (none of ours is)
            // says only that the file's I/O failed.
            OpenErrorKind::File(e) => e.raw_os_error().unwrap_or(libc::EIO),
            OpenErrorKind::InUse => libc::EBUSY,
            OpenErrorKind::HoldsData(_) => libc::EEXIST,
            OpenErrorKind::TooSmall { .. } => libc::ENOSPC,
            OpenErrorKind::SizeFixed { .. } => libc::EINVAL,
            OpenErrorKind::NothingThere => libc::ENODEV,
            OpenErrorKind::Driver { error, .. } => error.errno(),
            OpenErrorKind::Arenas(_) => libc::EINVAL,
            OpenErrorKind::Volume(e) => e.errno(),
            // `errno` is `None` only for a read past the end of a file,
            // which an open never does; as an I/O error if it did.
            OpenErrorKind::Fs(e) => e.errno().unwrap_or(libc::EIO),
            OpenErrorKind::NoVfio => libc::ENODEV,
            OpenErrorKind::NamedTwice => libc::EINVAL,
            OpenErrorKind::KeyFile(pollfs_driver::auth::keyfile::KeyFileError::Read {
                error,
                ..
            }) => error.raw_os_error().unwrap_or(libc::EIO),
            OpenErrorKind::KeyFile(_) => libc::EKEYREJECTED,
            // Another process serves the mirror's control socket.
            OpenErrorKind::Control(ServeError::Live(_)) => libc::EBUSY,
            // No directory would take the socket: each said why, and the
            // first one's code says it for all.
            OpenErrorKind::Control(ServeError::Nowhere(tried)) => tried
                .first()
                .and_then(|(_, e)| e.raw_os_error())
                .unwrap_or(libc::ENOENT),
        }
    }
}

impl OpenError {
    /// `kind` for `device`.
    pub fn new(device: impl fmt::Display, kind: OpenErrorKind) -> OpenError {
        OpenError {
            device: device.to_string(),
            kind,
        }
    }
}

impl From<SpecError> for OpenError {
    fn from(e: SpecError) -> OpenError {
        OpenError {
            device: String::new(),
            kind: OpenErrorKind::Spec(e),
        }
    }
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let OpenErrorKind::Spec(e) = &self.kind {
            return write!(f, "{e}");
        }
        write!(f, "{}: ", self.device)?;
        match &self.kind {
            OpenErrorKind::Spec(_) => Ok(()),
            OpenErrorKind::NoSuchFile => write!(f, "no such device file"),
            OpenErrorKind::File(e) => write!(f, "{e}"),
            OpenErrorKind::InUse => write!(
                f,
                "in use by another pollfs process (a mount, mkfs or fsck; a mount that was \
                 just unmounted holds it until it has written its checkpoint)"
            ),
            OpenErrorKind::HoldsData(found) => {
                write!(f, "holds {found}; pass --force to overwrite it")
            }
            OpenErrorKind::TooSmall { bytes, min } => write!(
                f,
                "{} is too small for a pollfs filesystem, which needs at least {} \
                 ({} blocks of 4 KiB)",
                show_bytes(*bytes),
                show_bytes(*min),
                min / 4096
            ),
            OpenErrorKind::SizeFixed { bytes: Some(b) } => write!(
                f,
                "exists ({}); an existing device keeps its size, so --size is only for a \
                 new device file",
                show_bytes(*b)
            ),
            OpenErrorKind::SizeFixed { bytes: None } => {
                write!(f, "--size is only for a new device file")
            }
            OpenErrorKind::NothingThere => write!(
                f,
                "holds no filesystem (emu and ram devices are new and empty each time they \
                 are opened)"
            ),
            OpenErrorKind::Driver { error, hint } => {
                write!(f, "{error}")?;
                match hint {
                    Some(h) => write!(f, " ({h})"),
                    None => Ok(()),
                }
            }
            OpenErrorKind::Arenas(Arenas::TcpWithDma) => write!(
                f,
                "nvme-tcp legs copy through plain frames, emu and vfio legs need their DMA \
                 memory: they cannot share a page cache"
            ),
            OpenErrorKind::Arenas(Arenas::EmuWithVfio) => write!(
                f,
                "emu and vfio legs are in different DMA memories and cannot share a page cache"
            ),
            OpenErrorKind::Volume(e) => write!(f, "{e}"),
            OpenErrorKind::Fs(e) => write!(f, "{e}"),
            OpenErrorKind::NoVfio => write!(f, "VFIO needs Linux"),
            OpenErrorKind::NamedTwice => write!(
                f,
                "is named twice in one volume; each leg must be a different controller"
            ),
            OpenErrorKind::Control(e) => write!(f, "{e}"),
            OpenErrorKind::KeyFile(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for OpenError {}
