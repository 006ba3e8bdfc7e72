//! What can go wrong on one NVMe/TCP connection, and the Fatal Error
//! Status the host reports for it in an H2CTermReq (NVMe/TCP 1.0, 3.5 and
//! 3.6.2.4).
//!
//! Every error here is fatal to the connection: the queue pair closes it
//! and the controller layer reconnects. The one non-fatal transport error,
//! a data digest mismatch, never becomes a `TcpError`: the command
//! completes with Transient Transport Error and is retried.

use core::fmt;

use super::stream::LinkError;
use crate::auth::AuthError;

/// Fatal Error Status values (NVMe/TCP 1.0, 3.6.2.4 and 3.6.2.5).
pub mod fes {
    /// Invalid PDU Header Field (FEI: the field's byte offset).
    pub const INVALID_HEADER_FIELD: u16 = 0x01;
    /// PDU Sequence Error.
    pub const SEQUENCE_ERROR: u16 = 0x02;
    /// Header Digest Error (FEI: the digest received).
    pub const HEADER_DIGEST: u16 = 0x03;
    /// Data Transfer Out of Range.
    pub const OUT_OF_RANGE: u16 = 0x04;
    /// R2T Limit Exceeded (host) / Data Transfer Limit Exceeded
    /// (controller).
    pub const LIMIT_EXCEEDED: u16 = 0x05;
    /// Unsupported Parameter (FEI: the field's byte offset).
    pub const UNSUPPORTED_PARAMETER: u16 = 0x06;
}

/// A fatal error on one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TcpError {
    /// The connection failed, closed or was refused.
    Link(LinkError),
    /// No ICResp, or no response to Fabrics Connect, before the deadline.
    SetupTimeout,
    /// PDU type `pdu` has an invalid header field at byte `offset`.
    HeaderField {
        /// PDU type.
        pdu: u8,
        /// Byte offset of the field from the start of the PDU.
        offset: u8,
    },
    /// A PDU the connection's state does not allow: an ICResp after the
    /// handshake, data for a command that moves none or after its last
    /// PDU, data out of order.
    Sequence {
        /// PDU type.
        pdu: u8,
    },
    /// The header digest of a PDU of type `pdu` does not match.
    HeaderDigest {
        /// PDU type.
        pdu: u8,
    },
    /// C2HData or R2T beyond command `cid`'s data.
    OutOfRange {
        /// Command id.
        cid: u16,
    },
    /// An R2T for `cid` while its previous one is still being served (the
    /// host allows one outstanding R2T per command).
    R2tLimit {
        /// Command id.
        cid: u16,
    },
    /// A data PDU or response names a command id that is not in flight.
    UnknownCid {
        /// Command id.
        cid: u16,
    },
    /// A response capsule from another submission queue.
    WrongQueue {
        /// The SQ id it carried.
        sqid: u16,
    },
    /// A successful completion for a command whose data did not all move.
    MissingData {
        /// Command id.
        cid: u16,
    },
    /// ICResp sets something the host did not ask for or cannot use, at
    /// byte `offset`.
    Unsupported {
        /// Byte offset of the field.
        offset: u8,
    },
    /// The controller terminated the connection (C2HTermReq).
    Terminated {
        /// Its Fatal Error Status.
        fes: u16,
    },
    /// In-band authentication (DH-HMAC-CHAP) after Connect failed.
    Auth(AuthError),
}

// Kept small: it travels inside `ProtocolError` on every poll's return
// path, PCIe's included.
const _: () = assert!(core::mem::size_of::<TcpError>() <= 4);

impl TcpError {
    /// The H2CTermReq status and information to send for this error, if
    /// the host reports it to the controller (not for a lost link or a
    /// controller that terminated first). For a header digest error the
    /// information is the digest received, which the caller reads from
    /// the header it holds.
    pub fn term_req(self) -> Option<(u16, u32)> {
        let field = |offset: u8| Some((fes::INVALID_HEADER_FIELD, u32::from(offset)));
        match self {
            TcpError::HeaderField { offset, .. } => field(offset),
            // CCCID of data PDUs, CID inside a response capsule.
            TcpError::UnknownCid { .. } => field(8),
            // The SQ Identifier inside the response capsule's CQE.
            TcpError::WrongQueue { .. } => field(18),
            TcpError::Sequence { .. } | TcpError::MissingData { .. } => {
                Some((fes::SEQUENCE_ERROR, 0))
            }
            TcpError::HeaderDigest { .. } => Some((fes::HEADER_DIGEST, 0)),
            TcpError::OutOfRange { .. } => Some((fes::OUT_OF_RANGE, 0)),
            TcpError::R2tLimit { .. } => Some((fes::LIMIT_EXCEEDED, 0)),
            TcpError::Unsupported { offset } => {
                Some((fes::UNSUPPORTED_PARAMETER, u32::from(offset)))
            }
            TcpError::Link(_)
            | TcpError::SetupTimeout
            | TcpError::Terminated { .. }
            | TcpError::Auth(_) => None,
        }
    }
}

// Returned by every poll of every TCP queue: small enough to travel in
// registers.
const _: () = assert!(core::mem::size_of::<crate::qpair::ProtocolError<TcpError>>() <= 8);

impl crate::transport::TransportError for TcpError {
    const NAME: &'static str = "NVMe/TCP";
}

impl fmt::Display for TcpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TcpError::Link(e) => write!(f, "connection: {e}"),
            TcpError::SetupTimeout => write!(f, "no ICResp or Connect response in time"),
            TcpError::HeaderField { pdu, offset } => {
                write!(
                    f,
                    "PDU type {pdu:#04x}: invalid header field at byte {offset}"
                )
            }
            TcpError::Sequence { pdu } => write!(f, "PDU type {pdu:#04x} out of sequence"),
            TcpError::HeaderDigest { pdu } => {
                write!(f, "PDU type {pdu:#04x}: header digest does not match")
            }
            TcpError::OutOfRange { cid } => {
                write!(f, "data transfer beyond command {cid}'s buffer")
            }
            TcpError::R2tLimit { cid } => {
                write!(f, "more than one R2T outstanding for command {cid}")
            }
            TcpError::UnknownCid { cid } => {
                write!(f, "PDU for command {cid}, which is not in flight")
            }
            TcpError::WrongQueue { sqid } => write!(f, "response from submission queue {sqid}"),
            TcpError::MissingData { cid } => {
                write!(f, "command {cid} completed before all its data moved")
            }
            TcpError::Unsupported { offset } => {
                write!(f, "ICResp: unsupported value at byte {offset}")
            }
            TcpError::Terminated { fes } => write!(
                f,
                "controller terminated the connection (C2HTermReq, fatal error status {fes:#x})"
            ),
            TcpError::Auth(e) => write!(f, "authentication: {e}"),
        }
    }
}

impl core::error::Error for TcpError {}

impl From<AuthError> for TcpError {
    fn from(e: AuthError) -> Self {
        TcpError::Auth(e)
    }
}

impl From<LinkError> for TcpError {
    fn from(e: LinkError) -> Self {
        TcpError::Link(e)
    }
}
