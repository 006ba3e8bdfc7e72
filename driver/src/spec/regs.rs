//! Controller registers (NVMe 1.4, section 3.1 "Register Definition").
//!
//! Each register is a newtype over its raw value with named accessors for
//! the fields the driver uses, so bit positions are written down once.

/// Offsets of the registers in BAR0 (NVMe 1.4, 3.1).
pub mod offset {
    /// Controller Capabilities (64-bit).
    pub const CAP: usize = 0x00;
    /// Version.
    pub const VS: usize = 0x08;
    /// Interrupt Mask Set.
    pub const INTMS: usize = 0x0c;
    /// Interrupt Mask Clear.
    pub const INTMC: usize = 0x10;
    /// Controller Configuration.
    pub const CC: usize = 0x14;
    /// Controller Status.
    pub const CSTS: usize = 0x1c;
    /// Admin Queue Attributes.
    pub const AQA: usize = 0x24;
    /// Admin Submission Queue Base Address (64-bit).
    pub const ASQ: usize = 0x28;
    /// Admin Completion Queue Base Address (64-bit).
    pub const ACQ: usize = 0x30;
    /// First doorbell (3.1.24).
    pub const DOORBELLS: usize = 0x1000;
}

/// CAP, Controller Capabilities (3.1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap(pub u64);

impl Cap {
    /// Maximum Queue Entries Supported, as a count (the field is 0-based).
    pub fn max_queue_entries(self) -> u32 {
        (self.0 & 0xffff) as u32 + 1
    }
    /// Contiguous Queues Required.
    pub fn contiguous_required(self) -> bool {
        self.0 & (1 << 16) != 0
    }
    /// Timeout: worst-case time for CSTS.RDY to change, in nanoseconds
    /// (the field counts 500 ms units).
    pub fn timeout_ns(self) -> u64 {
        ((self.0 >> 24) & 0xff) * 500_000_000
    }
    /// Doorbell Stride: doorbells are `4 << DSTRD` bytes apart.
    pub fn doorbell_stride(self) -> u32 {
        ((self.0 >> 32) & 0xf) as u32
    }
    /// NVM command set supported (CSS bit 0).
    pub fn supports_nvm_command_set(self) -> bool {
        self.0 & (1 << 37) != 0
    }
    /// Memory Page Size Minimum, as the exponent `12 + MPSMIN`.
    pub fn mps_min_shift(self) -> u32 {
        12 + ((self.0 >> 48) & 0xf) as u32
    }
    /// Memory Page Size Maximum, as the exponent `12 + MPSMAX`.
    pub fn mps_max_shift(self) -> u32 {
        12 + ((self.0 >> 52) & 0xf) as u32
    }
    /// Builds a CAP value (for the emulated controller and tests).
    pub fn build(mqes: u16, to_500ms: u8, dstrd: u8, mpsmin: u8, mpsmax: u8) -> Cap {
        Cap(u64::from(mqes)
            | (1 << 16)
            | (u64::from(to_500ms) << 24)
            | (u64::from(dstrd & 0xf) << 32)
            | (1 << 37)
            | (u64::from(mpsmin & 0xf) << 48)
            | (u64::from(mpsmax & 0xf) << 52))
    }
}

/// VS, Version (3.1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vs(pub u32);

impl Vs {
    /// `(major, minor, tertiary)`.
    pub fn version(self) -> (u16, u8, u8) {
        ((self.0 >> 16) as u16, (self.0 >> 8) as u8, self.0 as u8)
    }
}

/// CC, Controller Configuration (3.1.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Cc(pub u32);

impl Cc {
    /// Enable.
    pub fn enabled(self) -> bool {
        self.0 & 1 != 0
    }
    /// I/O Submission Queue Entry Size, as log2 bytes.
    pub fn iosqes(self) -> u32 {
        (self.0 >> 16) & 0xf
    }
    /// I/O Completion Queue Entry Size, as log2 bytes.
    pub fn iocqes(self) -> u32 {
        (self.0 >> 20) & 0xf
    }
    /// Memory Page Size, as the exponent `12 + MPS`.
    pub fn mps_shift(self) -> u32 {
        12 + ((self.0 >> 7) & 0xf)
    }
    /// Shutdown Notification field.
    pub fn shutdown(self) -> u32 {
        (self.0 >> 14) & 0x3
    }
    /// This configuration with SHN = 01b, a normal shutdown notification
    /// (7.6.2).
    pub fn with_normal_shutdown(self) -> Cc {
        Cc((self.0 & !(0x3 << 14)) | (1 << 14))
    }
    /// The configuration the driver runs with: NVM command set (CSS=0),
    /// `mps_shift`-sized pages, round-robin arbitration, 64-byte SQ entries
    /// (IOSQES=6) and 16-byte CQ entries (IOCQES=4).
    pub fn for_driver(mps_shift: u32, enable: bool) -> Cc {
        let mps = mps_shift.saturating_sub(12) & 0xf;
        Cc(u32::from(enable) | (mps << 7) | (6 << 16) | (4 << 20))
    }
}

/// CSTS, Controller Status (3.1.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Csts(pub u32);

impl Csts {
    /// Ready.
    pub const RDY: u32 = 1;
    /// Controller Fatal Status.
    pub const CFS: u32 = 1 << 1;
    /// Shutdown Status: complete.
    pub const SHST_COMPLETE: u32 = 2 << 2;
    /// Ready.
    pub fn ready(self) -> bool {
        self.0 & Self::RDY != 0
    }
    /// Controller Fatal Status: the controller hit an error it cannot
    /// report through a completion; only a reset recovers.
    pub fn fatal(self) -> bool {
        self.0 & Self::CFS != 0
    }
    /// Shutdown Status reports the shutdown complete.
    pub fn shutdown_complete(self) -> bool {
        self.0 & (0x3 << 2) == Self::SHST_COMPLETE
    }
}

/// AQA, Admin Queue Attributes (3.1.8): both sizes are 0-based, 12 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aqa(pub u32);

impl Aqa {
    /// AQA for queues of `sq_entries` and `cq_entries` entries (2..=4096).
    pub fn new(sq_entries: u16, cq_entries: u16) -> Aqa {
        let sq = u32::from(sq_entries.saturating_sub(1)) & 0xfff;
        let cq = u32::from(cq_entries.saturating_sub(1)) & 0xfff;
        Aqa(sq | (cq << 16))
    }
    /// Admin SQ entries.
    pub fn sq_entries(self) -> u32 {
        (self.0 & 0xfff) + 1
    }
    /// Admin CQ entries.
    pub fn cq_entries(self) -> u32 {
        ((self.0 >> 16) & 0xfff) + 1
    }
}

/// Offset of queue `qid`'s SQ tail doorbell (3.1.24): doorbells alternate
/// SQ tail, CQ head, each `4 << dstrd` bytes apart.
pub fn sq_tail_doorbell(qid: u16, dstrd: u32) -> usize {
    offset::DOORBELLS + (2 * usize::from(qid)) * (4usize << dstrd)
}

/// Offset of queue `qid`'s CQ head doorbell (3.1.25).
pub fn cq_head_doorbell(qid: u16, dstrd: u32) -> usize {
    offset::DOORBELLS + (2 * usize::from(qid) + 1) * (4usize << dstrd)
}

/// The inverse of the doorbell formulas: which queue and whether it is a
/// CQ head (`true`) or SQ tail (`false`) doorbell, if `offset` is one.
pub fn decode_doorbell(offset: usize, dstrd: u32) -> Option<(u16, bool)> {
    let rel = offset.checked_sub(offset::DOORBELLS)?;
    let stride = 4usize << dstrd;
    if rel % stride != 0 {
        return None;
    }
    let idx = rel / stride;
    let qid = u16::try_from(idx / 2).ok()?;
    Some((qid, idx % 2 == 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_fields_decode() {
        let cap = Cap::build(1023, 20, 2, 0, 4);
        assert_eq!(cap.max_queue_entries(), 1024);
        assert_eq!(cap.timeout_ns(), 10_000_000_000);
        assert_eq!(cap.doorbell_stride(), 2);
        assert!(cap.supports_nvm_command_set());
        assert!(cap.contiguous_required());
        assert_eq!(cap.mps_min_shift(), 12);
        assert_eq!(cap.mps_max_shift(), 16);
    }

    #[test]
    fn doorbells_follow_stride() {
        assert_eq!(sq_tail_doorbell(0, 0), 0x1000);
        assert_eq!(cq_head_doorbell(0, 0), 0x1004);
        assert_eq!(sq_tail_doorbell(3, 0), 0x1018);
        assert_eq!(cq_head_doorbell(1, 2), 0x1000 + 3 * 16);
        assert_eq!(decode_doorbell(0x1000 + 3 * 16, 2), Some((1, true)));
        assert_eq!(decode_doorbell(0x1002, 0), None);
        assert_eq!(decode_doorbell(0x20, 0), None);
    }

    #[test]
    fn cc_for_driver_sets_entry_sizes() {
        let cc = Cc::for_driver(12, true);
        assert!(cc.enabled());
        assert_eq!(cc.iosqes(), 6);
        assert_eq!(cc.iocqes(), 4);
        assert_eq!(cc.mps_shift(), 12);
        assert_eq!(cc.0 & 0x70, 0, "CSS selects the NVM command set");
        assert_eq!(Aqa::new(32, 32).0, 0x001f_001f);
        let shn = Cc(cc.0 | (3 << 14)).with_normal_shutdown();
        assert_eq!(shn.shutdown(), 1);
        assert!(shn.enabled());
        assert!(Csts(Csts::SHST_COMPLETE | Csts::RDY).shutdown_complete());
        assert!(!Csts(3 << 2).shutdown_complete());
        assert_eq!(Aqa(0x001f_001f).sq_entries(), 32);
    }
}
