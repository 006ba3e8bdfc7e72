//! [`Errno`]: the Linux errno each driver error kind stands for, written
//! once here, where the error types are defined. A door that speaks errno
//! (the C library) asks the error instead of matching it: the error enums
//! are `#[non_exhaustive]`, so a match in another crate would need a
//! catch-all arm, and a kind added later would fall into it silently. Here
//! every match is exhaustive, so a new kind does not compile until it has
//! its errno.
//!
//! EIO is the answer only where the kind is an I/O failure of the device
//! (a controller's fatal status, a command it failed, a queue whose
//! transport broke); the rest say what they are (a timeout, a device gone,
//! a refused connection, a controller breaking the protocol).

use crate::error::DriverError;
use crate::pcie::hal::DmaError;
use crate::qpair::ProtocolError;
use crate::spec::status::{specific, StatusType};
use crate::tcp::{LinkError, TcpError};
use crate::transport::QpairError;

/// Linux values, written out so that the `no_std` build has them (the
/// host tests check them against `libc`).
pub mod linux {
    #![allow(missing_docs)]
    pub const EIO: i32 = 5;
    pub const ENOMEM: i32 = 12;
    pub const EFAULT: i32 = 14;
    pub const EBUSY: i32 = 16;
    pub const ENODEV: i32 = 19;
    pub const EINVAL: i32 = 22;
    pub const EAGAIN: i32 = 11;
    pub const EPROTO: i32 = 71;
    pub const EOPNOTSUPP: i32 = 95;
    pub const ECONNABORTED: i32 = 103;
    pub const ECONNRESET: i32 = 104;
    pub const ETIMEDOUT: i32 = 110;
    pub const ECONNREFUSED: i32 = 111;
    pub const EHOSTUNREACH: i32 = 113;
    pub const EACCES: i32 = 13;
    pub const ENOKEY: i32 = 126;
}

use linux::*;

/// An error that says which Linux errno it is.
pub trait Errno {
    /// The errno (positive).
    fn errno(&self) -> i32;
}

impl<E: Errno> Errno for DriverError<E> {
    fn errno(&self) -> i32 {
        match self {
            DriverError::Transport(e) => e.errno(),
            DriverError::Timeout(_) => ETIMEDOUT,
            DriverError::Fatal => EIO,
            DriverError::DeviceGone => ENODEV,
            DriverError::Unsupported(_) => EOPNOTSUPP,
            // The controller's identify data broke the spec's rules.
            DriverError::Identify(_) => EPROTO,
            // The controller has no queue id left for us (as
            // `DevError::NoQueues`).
            DriverError::Admin { status, .. }
                if status.sct == StatusType::CommandSpecific
                    && status.sc == specific::INVALID_QID =>
            {
                EBUSY
            }
            // The controller failed a command it was given; the status
            // itself stays in the error for callers that branch on it.
            DriverError::Admin { .. } => EIO,
            DriverError::Protocol(e) => e.errno(),
            DriverError::Qpair(e) => e.errno(),
            DriverError::NoQueues => EBUSY,
            DriverError::Dead => EIO,
        }
    }
}

impl<E: Errno> Errno for ProtocolError<E> {
    fn errno(&self) -> i32 {
        match self {
            ProtocolError::UnknownCid(_)
            | ProtocolError::BadSqHead(_)
            | ProtocolError::WrongSqId(_) => EPROTO,
            // Ring memory out of reach: a DMA fault.
            ProtocolError::Unreadable => EFAULT,
            ProtocolError::Transport(e) => e.errno(),
        }
    }
}

impl Errno for QpairError {
    fn errno(&self) -> i32 {
        match self {
            QpairError::Full => EAGAIN,
            QpairError::BadPayload | QpairError::BadCid => EINVAL,
            QpairError::Broken => EIO,
        }
    }
}

impl Errno for DmaError {
    fn errno(&self) -> i32 {
        match self {
            DmaError::OutOfBounds => EFAULT,
            DmaError::NoMemory => ENOMEM,
        }
    }
}

impl Errno for LinkError {
    fn errno(&self) -> i32 {
        match self {
            // The peer ended the stream under a command: the connection
            // is gone, as after a reset.
            LinkError::Closed | LinkError::Reset => ECONNRESET,
            LinkError::Refused => ECONNREFUSED,
            LinkError::TimedOut => ETIMEDOUT,
            LinkError::Unreachable => EHOSTUNREACH,
            // The socket failed with an errno the link does not keep.
            LinkError::Other => EIO,
            LinkError::Tls(e) => e.errno(),
        }
    }
}

impl Errno for crate::tls::TlsError {
    fn errno(&self) -> i32 {
        use crate::tls::TlsError;
        match self {
            // The target does not take this host's key.
            TlsError::Refused | TlsError::NoPsk => EACCES,
            TlsError::Closed => ECONNRESET,
            TlsError::UnsupportedHash | TlsError::NotBuilt => EOPNOTSUPP,
            TlsError::NotTls | TlsError::Handshake | TlsError::Record => EPROTO,
            TlsError::Setup => EIO,
        }
    }
}

impl Errno for TcpError {
    fn errno(&self) -> i32 {
        match self {
            TcpError::Link(e) => e.errno(),
            TcpError::SetupTimeout => ETIMEDOUT,
            TcpError::HeaderField { .. }
            | TcpError::Sequence { .. }
            | TcpError::HeaderDigest { .. }
            | TcpError::OutOfRange { .. }
            | TcpError::R2tLimit { .. }
            | TcpError::UnknownCid { .. }
            | TcpError::WrongQueue { .. }
            | TcpError::MissingData { .. }
            | TcpError::Unsupported { .. } => EPROTO,
            TcpError::Terminated { .. } => ECONNABORTED,
            TcpError::Auth(e) => e.errno(),
        }
    }
}

impl Errno for crate::auth::AuthError {
    fn errno(&self) -> i32 {
        use crate::auth::AuthError as A;
        match self {
            A::NoKey => ENOKEY,
            A::Refused { .. } | A::ClosedAfterReply | A::ControllerFailed | A::ControllerSilent => {
                EACCES
            }
            A::SecureChannel | A::UnsupportedHash(_) | A::UnsupportedGroup(_) => EOPNOTSUPP,
            A::Malformed | A::Unexpected { .. } | A::TransactionId | A::BadDhValue => EPROTO,
            A::Random => EIO,
        }
    }
}

/// The fake transport's error, which never happens.
impl Errno for core::convert::Infallible {
    fn errno(&self) -> i32 {
        match *self {}
    }
}

#[cfg(all(feature = "vfio", target_os = "linux"))]
impl Errno for crate::pcie::vfio::VfioError {
    fn errno(&self) -> i32 {
        use crate::pcie::vfio::VfioError as V;
        match self {
            V::BadAddress => EINVAL,
            V::Sys { errno, .. } => *errno,
            V::ApiVersion(_) | V::NoType1 => EOPNOTSUPP,
            // Another device of the IOMMU group is held by another driver.
            V::NotViable => EBUSY,
            V::Bar0 => ENODEV,
            V::OtherContainer | V::BarAddresses | V::DmaOverBar => EINVAL,
            V::Driver(e) => e.errno(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::linux;

    #[test]
    fn the_written_out_values_are_linux_s() {
        let pairs = [
            (linux::EIO, libc::EIO),
            (linux::EACCES, libc::EACCES),
            (linux::ENOKEY, libc::ENOKEY),
            (linux::ENOMEM, libc::ENOMEM),
            (linux::EFAULT, libc::EFAULT),
            (linux::EBUSY, libc::EBUSY),
            (linux::ENODEV, libc::ENODEV),
            (linux::EINVAL, libc::EINVAL),
            (linux::EAGAIN, libc::EAGAIN),
            (linux::EPROTO, libc::EPROTO),
            (linux::EOPNOTSUPP, libc::EOPNOTSUPP),
            (linux::ECONNABORTED, libc::ECONNABORTED),
            (linux::ECONNRESET, libc::ECONNRESET),
            (linux::ETIMEDOUT, libc::ETIMEDOUT),
            (linux::ECONNREFUSED, libc::ECONNREFUSED),
            (linux::EHOSTUNREACH, libc::EHOSTUNREACH),
        ];
        for (ours, libc) in pairs {
            assert_eq!(ours, libc);
        }
    }
}
