//! Structured completion status (NVMe 1.4, 4.6.1 "Status Field Definition").
//!
//! Status stays structured (type, code, More, Do Not Retry) all the way to
//! the retry decision; it is flattened to a [`DevError`] only when a
//! request is handed back to the engine.

use pollfs_core::dev::DevError;

/// Status Code Type (4.6.1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusType {
    /// Generic Command Status (0).
    Generic,
    /// Command Specific Status (1).
    CommandSpecific,
    /// Media and Data Integrity Errors (2).
    Media,
    /// Path Related Status (3).
    Path,
    /// Vendor Specific (7).
    Vendor,
    /// A reserved type (4..=6), kept raw.
    Reserved(u8),
}

impl StatusType {
    /// From the 3-bit field.
    pub fn from_bits(v: u8) -> StatusType {
        match v & 7 {
            0 => StatusType::Generic,
            1 => StatusType::CommandSpecific,
            2 => StatusType::Media,
            3 => StatusType::Path,
            7 => StatusType::Vendor,
            r => StatusType::Reserved(r),
        }
    }
    /// The 3-bit field.
    pub fn bits(self) -> u8 {
        match self {
            StatusType::Generic => 0,
            StatusType::CommandSpecific => 1,
            StatusType::Media => 2,
            StatusType::Path => 3,
            StatusType::Vendor => 7,
            StatusType::Reserved(r) => r & 7,
        }
    }
}

/// Generic status codes the driver acts on (4.6.1.2.1).
pub mod generic {
    /// Successful Completion.
    pub const SUCCESS: u8 = 0x00;
    /// Invalid Command Opcode.
    pub const INVALID_OPCODE: u8 = 0x01;
    /// Invalid Field in Command.
    pub const INVALID_FIELD: u8 = 0x02;
    /// Data Transfer Error.
    pub const DATA_TRANSFER_ERROR: u8 = 0x04;
    /// Commands Aborted due to Power Loss Notification.
    pub const ABORTED_POWER_LOSS: u8 = 0x05;
    /// Internal Error.
    pub const INTERNAL_ERROR: u8 = 0x06;
    /// Command Abort Requested.
    pub const ABORT_REQUESTED: u8 = 0x07;
    /// Command Aborted due to SQ Deletion.
    pub const ABORTED_SQ_DELETION: u8 = 0x08;
    /// Invalid Namespace or Format.
    pub const INVALID_NAMESPACE: u8 = 0x0b;
    /// Transient Transport Error: a fabric lost or damaged the command's
    /// data (a data digest mismatch); a retry is likely to succeed.
    pub const TRANSIENT_TRANSPORT_ERROR: u8 = 0x22;
    /// LBA Out of Range.
    pub const LBA_OUT_OF_RANGE: u8 = 0x80;
    /// Namespace Not Ready.
    pub const NAMESPACE_NOT_READY: u8 = 0x82;
}

/// Command specific status codes used by queue management (4.6.1.2.2).
pub mod specific {
    /// Completion Queue Invalid.
    pub const INVALID_CQ: u8 = 0x00;
    /// Invalid Queue Identifier.
    pub const INVALID_QID: u8 = 0x01;
    /// Invalid Queue Size.
    pub const INVALID_QUEUE_SIZE: u8 = 0x02;
    /// Invalid Queue Deletion.
    pub const INVALID_QUEUE_DELETION: u8 = 0x0c;
}

/// Media and data integrity error codes (4.6.1.2.3).
pub mod media {
    /// Write Fault.
    pub const WRITE_FAULT: u8 = 0x80;
    /// Unrecovered Read Error.
    pub const UNRECOVERED_READ: u8 = 0x81;
    /// End-to-end Guard Check Error.
    pub const GUARD_CHECK: u8 = 0x82;
    /// End-to-end Application Tag Check Error.
    pub const APP_TAG_CHECK: u8 = 0x83;
    /// End-to-end Reference Tag Check Error.
    pub const REF_TAG_CHECK: u8 = 0x84;
}

/// One completion's status field (DW3 bits 31:17).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// Status Code Type.
    pub sct: StatusType,
    /// Status Code.
    pub sc: u8,
    /// Command Retry Delay index (CRD).
    pub crd: u8,
    /// More: the Error Information log has more detail.
    pub more: bool,
    /// Do Not Retry: resubmitting the same command is expected to fail.
    pub dnr: bool,
}

impl Status {
    /// Successful completion.
    pub const SUCCESS: Status = Status {
        sct: StatusType::Generic,
        sc: 0,
        crd: 0,
        more: false,
        dnr: false,
    };
    /// A status with the given type, code and DNR bit.
    pub fn new(sct: StatusType, sc: u8, dnr: bool) -> Status {
        Status {
            sct,
            sc,
            crd: 0,
            more: false,
            dnr,
        }
    }
    /// From the 15-bit status field (DW3 bits 31:17 shifted down by 17).
    pub fn from_field(f: u16) -> Status {
        Status {
            sc: (f & 0xff) as u8,
            sct: StatusType::from_bits(((f >> 8) & 7) as u8),
            crd: ((f >> 11) & 3) as u8,
            more: f & (1 << 13) != 0,
            dnr: f & (1 << 14) != 0,
        }
    }
    /// The 15-bit status field.
    pub fn to_field(self) -> u16 {
        u16::from(self.sc)
            | (u16::from(self.sct.bits()) << 8)
            | (u16::from(self.crd & 3) << 11)
            | (u16::from(self.more) << 13)
            | (u16::from(self.dnr) << 14)
    }
    /// Type and code as one number (`sct << 8 | sc`), the form kept in
    /// [`DevError::Status`].
    pub fn code(self) -> u16 {
        (u16::from(self.sct.bits()) << 8) | u16::from(self.sc)
    }
    /// True for a successful completion.
    pub fn is_success(self) -> bool {
        self.sct == StatusType::Generic && self.sc == generic::SUCCESS
    }
    /// True when this is the status of a command we asked to abort.
    pub fn is_abort_requested(self) -> bool {
        self.sct == StatusType::Generic && self.sc == generic::ABORT_REQUESTED
    }
    /// Whether resubmitting may help: the device's DNR bit decides, except
    /// for aborts the driver itself requested (the command already had its
    /// chance and timed out).
    pub fn may_retry(self) -> bool {
        !self.is_success() && !self.dnr && !self.is_abort_requested()
    }
    /// The engine-level error for this status (`Ok` on success).
    pub fn to_result(self) -> Result<(), DevError> {
        use StatusType::*;
        match (self.sct, self.sc) {
            (Generic, generic::SUCCESS) => Ok(()),
            (Generic, generic::LBA_OUT_OF_RANGE) => Err(DevError::OutOfRange),
            (Generic, generic::INVALID_OPCODE)
            | (Generic, generic::INVALID_FIELD)
            | (Generic, generic::INVALID_NAMESPACE) => Err(DevError::InvalidRequest),
            (Generic, generic::ABORT_REQUESTED) => Err(DevError::Timeout),
            (Generic, generic::ABORTED_POWER_LOSS) | (Generic, generic::ABORTED_SQ_DELETION) => {
                Err(DevError::ControllerFailed)
            }
            // A failed end-to-end check keeps its code, so the kind
            // reaches the edge (`spec::protection::PiCheck::of` names it).
            (Media, media::GUARD_CHECK | media::APP_TAG_CHECK | media::REF_TAG_CHECK) => {
                Err(DevError::Status(self.code()))
            }
            (Media, _) => Err(DevError::Media),
            _ => Err(DevError::Status(self.code())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_round_trips_and_maps() {
        let s = Status {
            sct: StatusType::Media,
            sc: media::UNRECOVERED_READ,
            crd: 2,
            more: true,
            dnr: true,
        };
        let f = s.to_field();
        assert_eq!(f, 0x81 | (2 << 8) | (2 << 11) | (1 << 13) | (1 << 14));
        assert_eq!(Status::from_field(f), s);
        assert_eq!(s.to_result(), Err(DevError::Media));
        assert!(!s.may_retry());
        let s = Status::new(StatusType::Generic, generic::INTERNAL_ERROR, false);
        assert!(s.may_retry());
        assert_eq!(s.to_result(), Err(DevError::Status(0x0006)));
        assert!(!Status::new(StatusType::Generic, generic::ABORT_REQUESTED, false).may_retry());
        assert_eq!(Status::SUCCESS.to_result(), Ok(()));
        assert_eq!(
            Status::new(StatusType::Generic, generic::LBA_OUT_OF_RANGE, true).to_result(),
            Err(DevError::OutOfRange)
        );
        assert_eq!(StatusType::from_bits(5), StatusType::Reserved(5));
        assert_eq!(StatusType::Reserved(5).bits(), 5);
    }
}
