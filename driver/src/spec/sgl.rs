//! The one SGL descriptor a fabric command carries in its data pointer
//! (NVMe 1.4, 4.4 "Scatter Gather List (SGL)"; NVMe/TCP 1.0, 3.3.2 and
//! Figure 14), in place of PRP entries.
//!
//! NVMe/TCP uses exactly two kinds: an SGL Data Block descriptor with the
//! Offset subtype for data inside the command capsule, and a Transport SGL
//! Data Block descriptor for data moved by the transport (C2HData PDUs, or
//! H2CData PDUs solicited by R2T).

use super::command::SubmissionEntry;

/// SGL identifiers: descriptor type in bits 7:4, subtype in bits 3:0
/// (NVMe 1.4, 4.4).
pub mod sgl_id {
    /// SGL Data Block (type 0h), subtype Offset (1h): in-capsule data at
    /// `address` bytes from the start of the capsule's data.
    pub const DATA_BLOCK_OFFSET: u8 = 0x01;
    /// Transport SGL Data Block (type 5h), subtype Transport specific
    /// (Ah): the Command Data Buffer of NVMe/TCP.
    pub const TRANSPORT_DATA_BLOCK: u8 = 0x5a;
}

/// PSDT (CDW0 bits 15:14) = 01b: SGLs for data, metadata in one
/// contiguous buffer; the value NVMe over Fabrics requires.
const PSDT_SGL: u32 = 0b01 << 14;
const PSDT_MASK: u32 = 0b11 << 14;

/// One SGL descriptor (16 bytes, command bytes 39:24).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SglDescriptor {
    /// Address, or the offset into the in-capsule data.
    pub address: u64,
    /// Length of the data in bytes.
    pub length: u32,
    /// Type and subtype ([`sgl_id`]).
    pub id: u8,
}

impl SglDescriptor {
    /// Data carried inside the capsule, `length` bytes from its start.
    pub fn in_capsule(length: u32) -> SglDescriptor {
        SglDescriptor {
            address: 0,
            length,
            id: sgl_id::DATA_BLOCK_OFFSET,
        }
    }
    /// Data moved by the transport (also used, with length 0, for a
    /// command without data).
    pub fn transport(length: u32) -> SglDescriptor {
        SglDescriptor {
            address: 0,
            length,
            id: sgl_id::TRANSPORT_DATA_BLOCK,
        }
    }
}

impl SubmissionEntry {
    /// Describes the command's data with one SGL descriptor and sets PSDT
    /// to 01b; replaces the PRP entries (same dwords 6..=9).
    pub fn set_sgl(&mut self, d: SglDescriptor) {
        self.dw[0] = (self.dw[0] & !PSDT_MASK) | PSDT_SGL;
        self.dw[6] = d.address as u32;
        self.dw[7] = (d.address >> 32) as u32;
        self.dw[8] = d.length;
        self.dw[9] = u32::from(d.id) << 24;
    }
    /// True when PSDT says the data pointer holds an SGL descriptor.
    pub fn uses_sgl(&self) -> bool {
        self.dw[0] & PSDT_MASK != 0
    }
    /// The SGL descriptor in the data pointer (meaningful when
    /// [`uses_sgl`](Self::uses_sgl)).
    pub fn sgl(&self) -> SglDescriptor {
        SglDescriptor {
            address: u64::from(self.dw[6]) | (u64::from(self.dw[7]) << 32),
            length: self.dw[8],
            id: (self.dw[9] >> 24) as u8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_sit_in_bytes_24_to_39_with_psdt_01() {
        let mut e = SubmissionEntry::write(1, 8, 8, false);
        e.set_cid(0x1234);
        e.set_sgl(SglDescriptor::in_capsule(4096));
        let b = e.to_bytes();
        assert_eq!(b[1] >> 6, 0b01, "PSDT");
        assert_eq!(&b[2..4], &[0x34, 0x12], "cid untouched");
        assert_eq!(&b[24..32], &[0; 8]);
        assert_eq!(&b[32..36], &4096u32.to_le_bytes());
        assert_eq!(b[39], 0x01);
        assert!(e.uses_sgl());
        assert_eq!(e.sgl(), SglDescriptor::in_capsule(4096));
        e.set_sgl(SglDescriptor::transport(8192));
        assert_eq!(e.to_bytes()[39], 0x5a);
        assert_eq!(e.sgl().length, 8192);
        assert!(!SubmissionEntry::read(1, 0, 1).uses_sgl());
    }
}
