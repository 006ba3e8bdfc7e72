//! The 16-byte completion queue entry (NVMe 1.4, 4.6 "Completion Queue
//! Entry").
//!
//! The driver never trusts an entry: [`CompletionEntry::from_bytes`] only
//! splits fields; range checks against the queue (SQ head, SQ id, command
//! id) happen in the queue code, which knows the limits.

use core::mem::size_of;

use super::status::Status;

/// Size of a completion entry in the ring (CC.IOCQES = 4).
pub const CQE_SIZE: usize = 16;

/// Byte offset of DW2 within an entry. DW2 (SQ head, SQ id) and DW3
/// (command id, phase, status) make up the entry's second 8-byte word,
/// which the host reads in one aligned load, the phase with it.
pub const CQE_DW2: usize = 8;

/// One completion queue entry (4.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CompletionEntry {
    /// DW0: command specific result.
    pub dw0: u32,
    /// DW1: reserved.
    pub dw1: u32,
    /// DW2: SQ head pointer (15:0) and SQ identifier (31:16).
    pub dw2: u32,
    /// DW3: command id (15:0), phase (16), status (31:17).
    pub dw3: u32,
}

const _: () = assert!(size_of::<CompletionEntry>() == CQE_SIZE);

impl CompletionEntry {
    /// Builds an entry (the emulated controller's side).
    pub fn new(dw0: u32, sq_head: u16, sq_id: u16, cid: u16, phase: bool, status: Status) -> Self {
        CompletionEntry {
            dw0,
            dw1: 0,
            dw2: u32::from(sq_head) | (u32::from(sq_id) << 16),
            dw3: u32::from(cid) | (u32::from(phase) << 16) | (u32::from(status.to_field()) << 17),
        }
    }
    /// SQ Head Pointer: how far the controller has consumed the SQ.
    pub fn sq_head(&self) -> u16 {
        self.dw2 as u16
    }
    /// SQ Identifier the command came from.
    pub fn sq_id(&self) -> u16 {
        (self.dw2 >> 16) as u16
    }
    /// Command Identifier.
    pub fn cid(&self) -> u16 {
        self.dw3 as u16
    }
    /// Phase Tag: flips each pass round the ring, so the host can tell a
    /// new entry from a stale one without a doorbell read.
    pub fn phase(&self) -> bool {
        self.dw3 & (1 << 16) != 0
    }
    /// True when the status field is all zeros: success, with no More
    /// or DNR flag. The common case, checked without decoding the status.
    pub fn plain_success(&self) -> bool {
        self.dw3 >> 17 == 0
    }
    /// The structured status.
    pub fn status(&self) -> Status {
        Status::from_field((self.dw3 >> 17) as u16)
    }
    /// The entry's DW2 and DW3 from its second 8-byte word (read as a
    /// little-endian `u64` at [`CQE_DW2`]); DW0 and DW1 are zero.
    #[inline]
    pub fn from_high_word(w: u64) -> CompletionEntry {
        CompletionEntry {
            dw2: w as u32,
            dw3: (w >> 32) as u32,
            ..CompletionEntry::default()
        }
    }
    /// DW0 and DW1 from the entry's first 8-byte word (a little-endian
    /// `u64` at offset 0).
    #[inline]
    pub fn set_low_word(&mut self, w: u64) {
        self.dw0 = w as u32;
        self.dw1 = (w >> 32) as u32;
    }
    /// Little-endian wire bytes.
    pub fn to_bytes(&self) -> [u8; CQE_SIZE] {
        let mut b = [0u8; CQE_SIZE];
        b[0..4].copy_from_slice(&self.dw0.to_le_bytes());
        b[4..8].copy_from_slice(&self.dw1.to_le_bytes());
        b[8..12].copy_from_slice(&self.dw2.to_le_bytes());
        b[12..16].copy_from_slice(&self.dw3.to_le_bytes());
        b
    }
    /// Splits wire bytes into fields.
    pub fn from_bytes(b: &[u8; CQE_SIZE]) -> CompletionEntry {
        let [a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3, d0, d1, d2, d3] = *b;
        CompletionEntry {
            dw0: u32::from_le_bytes([a0, a1, a2, a3]),
            dw1: u32::from_le_bytes([b0, b1, b2, b3]),
            dw2: u32::from_le_bytes([c0, c1, c2, c3]),
            dw3: u32::from_le_bytes([d0, d1, d2, d3]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::status::{generic, StatusType};

    #[test]
    fn completion_fields_round_trip() {
        let st = Status::new(StatusType::Generic, generic::LBA_OUT_OF_RANGE, true);
        let e = CompletionEntry::new(0xaabb, 17, 3, 0x1234, true, st);
        let b = e.to_bytes();
        assert_eq!(&b[8..10], &17u16.to_le_bytes());
        assert_eq!(&b[10..12], &3u16.to_le_bytes());
        assert_eq!(&b[12..14], &0x1234u16.to_le_bytes());
        assert_eq!(b[14] & 1, 1, "phase is DW3 bit 16");
        let back = CompletionEntry::from_bytes(&b);
        assert_eq!(back, e);
        assert_eq!(back.sq_head(), 17);
        assert_eq!(back.sq_id(), 3);
        assert_eq!(back.cid(), 0x1234);
        assert!(back.phase());
        assert_eq!(back.status(), st);
        assert!(!back.plain_success());
        let ok = CompletionEntry::new(0, 0, 1, 7, true, Status::SUCCESS);
        assert!(ok.plain_success() && ok.status().is_success());
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        let mut high = CompletionEntry::from_high_word(word(CQE_DW2));
        assert_eq!(
            (high.dw0, high.dw1, high.dw2, high.dw3),
            (0, 0, e.dw2, e.dw3)
        );
        high.set_low_word(word(0));
        assert_eq!(high, e, "the two words make the entry");
    }
}
