//! [`OpenError`]: why a device could not be opened, one kind per mistake,
//! each message naming the device and what to do about it.

use std::fmt;

use pollfs_core::volume::VolumeError;

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
        /// What the driver said.
        error: String,
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
        }
    }
}

impl std::error::Error for OpenError {}
