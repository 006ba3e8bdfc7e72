//! The driver's error type. Engine-facing paths flatten it into
//! [`DevError`]; setup paths return it whole so a caller can see which
//! step failed and what the controller said.
//!
//! It is generic over the transport's own error
//! ([`Transport::Error`](crate::transport::Transport::Error): DMA memory on
//! PCIe, the connection on TCP), which the neutral layer carries without
//! knowing what it is.

use core::fmt;

use pollfs_core::dev::DevError;

use crate::qpair::ProtocolError;
use crate::spec::identify::IdentifyError;
use crate::spec::status::{specific, Status, StatusType};
use crate::transport::{QpairError, TransportError};

/// A step of controller bring-up or reset that can time out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Waiting for CSTS.RDY to clear after CC.EN=0.
    Disable,
    /// Waiting for CSTS.RDY to set after CC.EN=1.
    Enable,
    /// Waiting for an admin command to complete.
    Admin,
}

/// Everything that can go wrong in the driver, `E` being what can go wrong
/// in its transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DriverError<E> {
    /// The transport failed: DMA memory could not be allocated or accessed
    /// (PCIe), a connection failed or broke its protocol (TCP).
    Transport(E),
    /// A step did not finish within its deadline (CAP.TO or the admin
    /// timeout), measured with the caller's clock.
    Timeout(Stage),
    /// The controller set CSTS.CFS.
    Fatal,
    /// Registers read as all ones: the device is gone from the bus.
    DeviceGone,
    /// The controller lacks something the driver needs.
    Unsupported(&'static str),
    /// Identify data failed validation.
    Identify(IdentifyError),
    /// An admin command completed with an error status.
    Admin {
        /// The command's opcode.
        opcode: u8,
        /// What the controller said.
        status: Status,
    },
    /// The controller broke the queue protocol.
    Protocol(ProtocolError<E>),
    /// A queue pair refused or failed a command.
    Qpair(QpairError),
    /// No I/O queue ids are left.
    NoQueues,
    /// Resets keep failing; the controller is given up on.
    Dead,
}

impl<E: TransportError> core::error::Error for DriverError<E> {}

impl<E: TransportError> fmt::Display for DriverError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::Transport(e) => write!(f, "{}: {e}", E::NAME),
            DriverError::Timeout(s) => write!(f, "timed out in {s:?}"),
            DriverError::Fatal => write!(f, "controller fatal status"),
            DriverError::DeviceGone => write!(f, "device not responding"),
            DriverError::Unsupported(w) => write!(f, "unsupported controller: {w}"),
            DriverError::Identify(e) => write!(f, "identify: {e}"),
            DriverError::Admin { opcode, status } => {
                write!(f, "admin opcode {opcode:#04x} failed: {status:?}")
            }
            DriverError::Protocol(e) => write!(f, "queue protocol violation: {e}"),
            DriverError::Qpair(e) => write!(f, "transport: {e}"),
            DriverError::NoQueues => write!(f, "no I/O queues left"),
            DriverError::Dead => write!(f, "controller failed and could not be reset"),
        }
    }
}

impl<E> From<IdentifyError> for DriverError<E> {
    fn from(e: IdentifyError) -> Self {
        DriverError::Identify(e)
    }
}
impl<E> From<ProtocolError<E>> for DriverError<E> {
    fn from(e: ProtocolError<E>) -> Self {
        DriverError::Protocol(e)
    }
}
impl<E> From<QpairError> for DriverError<E> {
    fn from(e: QpairError) -> Self {
        DriverError::Qpair(e)
    }
}

impl<E> From<DriverError<E>> for DevError {
    fn from(e: DriverError<E>) -> Self {
        match e {
            DriverError::Timeout(_) => DevError::Timeout,
            DriverError::Identify(_) | DriverError::Unsupported(_) => DevError::BadGeometry,
            DriverError::NoQueues => DevError::NoQueues,
            DriverError::Admin { status, .. }
                if status.sct == StatusType::CommandSpecific
                    && status.sc == specific::INVALID_QID =>
            {
                DevError::NoQueues
            }
            DriverError::Qpair(QpairError::BadPayload) => DevError::InvalidRequest,
            _ => DevError::ControllerFailed,
        }
    }
}
