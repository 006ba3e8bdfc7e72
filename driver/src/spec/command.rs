//! The 64-byte submission queue entry (NVMe 1.4, 4.2 "Submission Queue
//! Entry - Command Format") and builders for the commands the driver issues.
//!
//! The entry is kept as sixteen host-order dwords and converted to
//! little-endian bytes only when it is copied into the ring, so builders
//! read like the spec's dword tables.

use core::mem::size_of;

/// Admin command opcodes (NVMe 1.4, 5 "Admin Command Set").
pub mod admin_opcode {
    /// Delete I/O Submission Queue (5.6).
    pub const DELETE_IO_SQ: u8 = 0x00;
    /// Create I/O Submission Queue (5.4).
    pub const CREATE_IO_SQ: u8 = 0x01;
    /// Get Log Page (5.14).
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Delete I/O Completion Queue (5.5).
    pub const DELETE_IO_CQ: u8 = 0x04;
    /// Create I/O Completion Queue (5.3).
    pub const CREATE_IO_CQ: u8 = 0x05;
    /// Identify (5.15).
    pub const IDENTIFY: u8 = 0x06;
    /// Abort (5.1).
    pub const ABORT: u8 = 0x08;
    /// Set Features (5.21).
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features (5.13).
    pub const GET_FEATURES: u8 = 0x0a;
    /// Keep Alive (5.16).
    pub const KEEP_ALIVE: u8 = 0x18;
}

/// NVM command set opcodes (NVMe 1.4, 6 "NVM Command Set"; the commands
/// are cited by name below, each has its own subsection of chapter 6).
pub mod io_opcode {
    /// Flush command.
    pub const FLUSH: u8 = 0x00;
    /// Write command.
    pub const WRITE: u8 = 0x01;
    /// Read command.
    pub const READ: u8 = 0x02;
    /// Write Zeroes command.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management command.
    pub const DATASET_MANAGEMENT: u8 = 0x09;
}

/// Identify CNS values (NVMe 1.4, 5.15).
pub mod cns {
    /// Identify Namespace data structure for NSID.
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller data structure.
    pub const CONTROLLER: u8 = 0x01;
    /// Active Namespace ID list.
    pub const ACTIVE_NAMESPACES: u8 = 0x02;
}

/// Feature identifiers (NVMe 1.4, 5.21.1).
pub mod feature {
    /// Number of Queues (5.21.1.7).
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
}

/// Log page identifiers (NVMe 1.4, 5.14.1).
pub mod log_page {
    /// Error Information (5.14.1.1), 64 bytes per entry.
    pub const ERROR: u8 = 0x01;
    /// SMART / Health Information (5.14.1.2), 512 bytes.
    pub const SMART: u8 = 0x02;
}

/// One submission queue entry (4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SubmissionEntry {
    /// Command dwords 0..=15 in host order.
    pub dw: [u32; 16],
}

const _: () = assert!(size_of::<SubmissionEntry>() == 64);

/// Size of a submission entry in the ring (CC.IOSQES = 6).
pub const SQE_SIZE: usize = 64;

impl SubmissionEntry {
    /// An entry with `opcode` and namespace `nsid`, everything else zero.
    #[inline]
    pub fn new(opcode: u8, nsid: u32) -> SubmissionEntry {
        let mut e = SubmissionEntry::default();
        e.dw[0] = u32::from(opcode);
        e.dw[1] = nsid;
        e
    }
    /// Opcode (CDW0 bits 7:0).
    pub fn opcode(&self) -> u8 {
        self.dw[0] as u8
    }
    /// Command identifier (CDW0 bits 31:16).
    pub fn cid(&self) -> u16 {
        (self.dw[0] >> 16) as u16
    }
    /// Sets the command identifier.
    #[inline]
    pub fn set_cid(&mut self, cid: u16) {
        self.dw[0] = (self.dw[0] & 0xffff) | (u32::from(cid) << 16);
    }
    /// Namespace identifier.
    pub fn nsid(&self) -> u32 {
        self.dw[1]
    }
    /// PRP entry 1 (DW6-7).
    pub fn prp1(&self) -> u64 {
        u64::from(self.dw[6]) | (u64::from(self.dw[7]) << 32)
    }
    /// PRP entry 2 (DW8-9).
    pub fn prp2(&self) -> u64 {
        u64::from(self.dw[8]) | (u64::from(self.dw[9]) << 32)
    }
    /// Sets both PRP entries; PSDT stays 0 (PRPs, not SGLs).
    #[inline]
    pub fn set_prps(&mut self, prp1: u64, prp2: u64) {
        self.dw[6] = prp1 as u32;
        self.dw[7] = (prp1 >> 32) as u32;
        self.dw[8] = prp2 as u32;
        self.dw[9] = (prp2 >> 32) as u32;
    }
    /// Command dword `n` (10..=15).
    pub fn cdw(&self, n: usize) -> u32 {
        self.dw.get(n).copied().unwrap_or(0)
    }
    /// Starting LBA of an NVM command (CDW10-11).
    pub fn slba(&self) -> u64 {
        u64::from(self.dw[10]) | (u64::from(self.dw[11]) << 32)
    }
    /// Little-endian wire bytes.
    #[inline]
    pub fn to_bytes(&self) -> [u8; SQE_SIZE] {
        let mut out = [0u8; SQE_SIZE];
        for (chunk, dw) in out.chunks_exact_mut(4).zip(self.dw.iter()) {
            chunk.copy_from_slice(&dw.to_le_bytes());
        }
        out
    }
    /// Parses wire bytes (the emulated controller's side of the ring).
    pub fn from_bytes(bytes: &[u8; SQE_SIZE]) -> SubmissionEntry {
        let mut e = SubmissionEntry::default();
        for (dw, chunk) in e.dw.iter_mut().zip(bytes.chunks_exact(4)) {
            let mut b = [0u8; 4];
            b.copy_from_slice(chunk);
            *dw = u32::from_le_bytes(b);
        }
        e
    }

    // ---- Admin commands ----

    /// Identify (5.15): `cns` selects the structure; data goes to `prp1`
    /// (4 KiB, page aligned, so PRP2 is not needed).
    pub fn identify(cns: u8, nsid: u32, prp1: u64) -> SubmissionEntry {
        let mut e = SubmissionEntry::new(admin_opcode::IDENTIFY, nsid);
        e.set_prps(prp1, 0);
        e.dw[10] = u32::from(cns);
        e
    }
    /// Set Features, Number of Queues (5.21.1.7): counts are 1-based here
    /// and encoded 0-based.
    pub fn set_num_queues(sq: u16, cq: u16) -> SubmissionEntry {
        let mut e = SubmissionEntry::new(admin_opcode::SET_FEATURES, 0);
        e.dw[10] = u32::from(feature::NUMBER_OF_QUEUES);
        e.dw[11] = u32::from(sq.saturating_sub(1)) | (u32::from(cq.saturating_sub(1)) << 16);
        e
    }
    /// Get Features (5.13) for feature `fid`, current value.
    pub fn get_features(fid: u8) -> SubmissionEntry {
        let mut e = SubmissionEntry::new(admin_opcode::GET_FEATURES, 0);
        e.dw[10] = u32::from(fid);
        e
    }
    /// Create I/O Completion Queue (5.3): physically contiguous, interrupts
    /// disabled (the driver polls).
    pub fn create_io_cq(qid: u16, entries: u16, base: u64) -> SubmissionEntry {
        let mut e = SubmissionEntry::new(admin_opcode::CREATE_IO_CQ, 0);
        e.set_prps(base, 0);
        e.dw[10] = u32::from(qid) | (u32::from(entries.saturating_sub(1)) << 16);
        e.dw[11] = 1;
        e
    }
    /// Create I/O Submission Queue (5.4) bound to completion queue `cqid`.
    pub fn create_io_sq(qid: u16, entries: u16, base: u64, cqid: u16) -> SubmissionEntry {
        let mut e = SubmissionEntry::new(admin_opcode::CREATE_IO_SQ, 0);
        e.set_prps(base, 0);
        e.dw[10] = u32::from(qid) | (u32::from(entries.saturating_sub(1)) << 16);
        e.dw[11] = 1 | (u32::from(cqid) << 16);
        e
    }
    /// Delete I/O Submission Queue (5.6).
    pub fn delete_io_sq(qid: u16) -> SubmissionEntry {
        let mut e = SubmissionEntry::new(admin_opcode::DELETE_IO_SQ, 0);
        e.dw[10] = u32::from(qid);
        e
    }
    /// Delete I/O Completion Queue (5.5).
    pub fn delete_io_cq(qid: u16) -> SubmissionEntry {
        let mut e = SubmissionEntry::new(admin_opcode::DELETE_IO_CQ, 0);
        e.dw[10] = u32::from(qid);
        e
    }
    /// Get Log Page (5.14): `dwords` (1-based) of log `lid` into `prp1`
    /// (at most one 4 KiB page here).
    pub fn get_log_page(lid: u8, nsid: u32, dwords: u32, prp1: u64) -> SubmissionEntry {
        let mut e = SubmissionEntry::new(admin_opcode::GET_LOG_PAGE, nsid);
        e.set_prps(prp1, 0);
        let numd = dwords.saturating_sub(1);
        e.dw[10] = u32::from(lid) | ((numd & 0xffff) << 16);
        e.dw[11] = numd >> 16;
        e
    }
    /// Keep Alive (5.16): restarts the controller's Keep Alive timer
    /// (7.12); a fabric controller tears the association down when it
    /// expires.
    pub fn keep_alive() -> SubmissionEntry {
        SubmissionEntry::new(admin_opcode::KEEP_ALIVE, 0)
    }
    /// Abort (5.1) the command `cid` on submission queue `sqid`.
    pub fn abort(sqid: u16, cid: u16) -> SubmissionEntry {
        let mut e = SubmissionEntry::new(admin_opcode::ABORT, 0);
        e.dw[10] = u32::from(sqid) | (u32::from(cid) << 16);
        e
    }

    // ---- NVM commands ----

    #[inline]
    fn rw(opcode: u8, nsid: u32, slba: u64, blocks: u32) -> SubmissionEntry {
        let mut e = SubmissionEntry::new(opcode, nsid);
        e.dw[10] = slba as u32;
        e.dw[11] = (slba >> 32) as u32;
        e.dw[12] = blocks.saturating_sub(1) & 0xffff;
        e
    }
    /// Read (chapter 6) of `blocks` (1..=65536) logical blocks; PRPs set later.
    #[inline]
    pub fn read(nsid: u32, slba: u64, blocks: u32) -> SubmissionEntry {
        SubmissionEntry::rw(io_opcode::READ, nsid, slba, blocks)
    }
    /// Write (chapter 6); `fua` makes the data durable before completion.
    #[inline]
    pub fn write(nsid: u32, slba: u64, blocks: u32, fua: bool) -> SubmissionEntry {
        let mut e = SubmissionEntry::rw(io_opcode::WRITE, nsid, slba, blocks);
        if fua {
            e.dw[12] |= 1 << 30;
        }
        e
    }
    /// Flush command.
    pub fn flush(nsid: u32) -> SubmissionEntry {
        SubmissionEntry::new(io_opcode::FLUSH, nsid)
    }
    /// Write Zeroes (chapter 6) of `blocks` (1..=65536) logical blocks.
    pub fn write_zeroes(nsid: u32, slba: u64, blocks: u32) -> SubmissionEntry {
        SubmissionEntry::rw(io_opcode::WRITE_ZEROES, nsid, slba, blocks)
    }
    /// Dataset Management (chapter 6) with the Deallocate attribute over `ranges`
    /// (1..=256) range entries stored at `prp1`.
    pub fn deallocate(nsid: u32, ranges: u16, prp1: u64) -> SubmissionEntry {
        let mut e = SubmissionEntry::new(io_opcode::DATASET_MANAGEMENT, nsid);
        e.set_prps(prp1, 0);
        e.dw[10] = u32::from(ranges.saturating_sub(1)) & 0xff;
        e.dw[11] = 1 << 2;
        e
    }
    /// Adds protection information fields to a Read, Write or Write
    /// Zeroes: `prinfo` (PRACT and PRCHK, CDW12 bits 29:26, as
    /// [`Protection::prinfo`](super::protection::Protection::prinfo)
    /// gives them, or 0) and the expected initial reference tag (ILBRT,
    /// CDW14). The application tag and its mask (CDW15) stay 0: the
    /// controller writes 0 and no check looks at it.
    #[inline]
    pub fn protect(&mut self, prinfo: u32, ilbrt: u32) {
        self.dw[12] |= prinfo;
        self.dw[14] = ilbrt;
    }
    /// PRINFO bits of a Read/Write/Write Zeroes (CDW12 bits 29:26, in
    /// place).
    pub fn prinfo(&self) -> u32 {
        self.dw[12] & super::protection::prinfo::MASK
    }
    /// Expected initial logical block reference tag (CDW14).
    pub fn ilbrt(&self) -> u32 {
        self.dw[14]
    }
    /// Expected application tag and its mask (CDW15: LBAT, LBATM).
    pub fn app_tag(&self) -> (u16, u16) {
        (self.dw[15] as u16, (self.dw[15] >> 16) as u16)
    }
    /// Number of logical blocks of a Read/Write/Write Zeroes (CDW12, 1-based).
    pub fn nlb(&self) -> u32 {
        (self.dw[12] & 0xffff) + 1
    }
    /// Force Unit Access bit of a Read/Write.
    pub fn fua(&self) -> bool {
        self.dw[12] & (1 << 30) != 0
    }
}

/// One Dataset Management range (chapter 6, Dataset Management): 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DsmRange {
    /// Context attributes (0: none).
    pub attributes: u32,
    /// Length in logical blocks.
    pub blocks: u32,
    /// Starting LBA.
    pub slba: u64,
}

/// Size of a [`DsmRange`] on the wire.
pub const DSM_RANGE_SIZE: usize = 16;

impl DsmRange {
    /// Little-endian wire bytes.
    pub fn to_bytes(&self) -> [u8; DSM_RANGE_SIZE] {
        let mut b = [0u8; DSM_RANGE_SIZE];
        b[0..4].copy_from_slice(&self.attributes.to_le_bytes());
        b[4..8].copy_from_slice(&self.blocks.to_le_bytes());
        b[8..16].copy_from_slice(&self.slba.to_le_bytes());
        b
    }
    /// Parses wire bytes.
    pub fn from_bytes(b: &[u8; DSM_RANGE_SIZE]) -> DsmRange {
        let [a0, a1, a2, a3, l0, l1, l2, l3, s0, s1, s2, s3, s4, s5, s6, s7] = *b;
        DsmRange {
            attributes: u32::from_le_bytes([a0, a1, a2, a3]),
            blocks: u32::from_le_bytes([l0, l1, l2, l3]),
            slba: u64::from_le_bytes([s0, s1, s2, s3, s4, s5, s6, s7]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_encoding_matches_spec_layout() {
        let mut e = SubmissionEntry::write(1, 0x1_2345_6789, 8, true);
        e.set_cid(0xbeef);
        e.set_prps(0x1000, 0x2000);
        let b = e.to_bytes();
        assert_eq!(b[0], io_opcode::WRITE);
        assert_eq!(&b[2..4], &[0xef, 0xbe]);
        assert_eq!(&b[4..8], &[1, 0, 0, 0]);
        assert_eq!(&b[24..32], &0x1000u64.to_le_bytes());
        assert_eq!(&b[32..40], &0x2000u64.to_le_bytes());
        assert_eq!(&b[40..48], &0x1_2345_6789u64.to_le_bytes());
        assert_eq!(
            u32::from_le_bytes([b[48], b[49], b[50], b[51]]),
            7 | (1 << 30)
        );
        let back = SubmissionEntry::from_bytes(&b);
        assert_eq!(back, e);
        assert_eq!(back.nlb(), 8);
        assert!(back.fua());
        assert_eq!(back.slba(), 0x1_2345_6789);
        assert_eq!(back.cid(), 0xbeef);
        let mut r = SubmissionEntry::read(1, 0, 65536);
        assert_eq!(r.nlb(), 65536);
        assert!(!r.fua());
        assert_eq!((r.prinfo(), r.ilbrt(), r.app_tag()), (0, 0, (0, 0)));
        r.protect(0b1101 << 26, 0xdead_beef);
        assert_eq!(r.nlb(), 65536);
        assert_eq!(r.prinfo(), 0b1101 << 26);
        assert_eq!(&r.to_bytes()[56..60], &0xdead_beefu32.to_le_bytes());
    }

    #[test]
    fn admin_encoding_matches_spec_layout() {
        let e = SubmissionEntry::create_io_sq(3, 256, 0x8000, 3);
        assert_eq!(e.opcode(), admin_opcode::CREATE_IO_SQ);
        assert_eq!(e.dw[10], 3 | (255 << 16));
        assert_eq!(e.dw[11], 1 | (3 << 16));
        let e = SubmissionEntry::create_io_cq(3, 256, 0x9000);
        assert_eq!(e.dw[10], 3 | (255 << 16));
        assert_eq!(e.dw[11], 1);
        assert_eq!(e.prp1(), 0x9000);
        let e = SubmissionEntry::set_num_queues(4, 8);
        assert_eq!(e.dw[10], 7);
        assert_eq!(e.dw[11], 3 | (7 << 16));
        let e = SubmissionEntry::identify(cns::CONTROLLER, 0, 0x4000);
        assert_eq!(e.dw[10], 1);
        let e = SubmissionEntry::abort(2, 17);
        assert_eq!(e.dw[10], 2 | (17 << 16));
        let e = SubmissionEntry::get_log_page(log_page::SMART, 0xffff_ffff, 128, 0x4000);
        assert_eq!(e.dw[10], 2 | (127 << 16));
        assert_eq!(e.dw[11], 0);
        let e = SubmissionEntry::deallocate(1, 2, 0x5000);
        assert_eq!(e.dw[10], 1);
        assert_eq!(e.dw[11], 4);
        let e = SubmissionEntry::write_zeroes(1, 10, 16);
        assert_eq!(e.opcode(), io_opcode::WRITE_ZEROES);
        assert_eq!(e.dw[12], 15);
        assert_eq!(SubmissionEntry::flush(1).opcode(), io_opcode::FLUSH);
        assert_eq!(SubmissionEntry::delete_io_sq(5).dw[10], 5);
        assert_eq!(
            SubmissionEntry::delete_io_cq(5).opcode(),
            admin_opcode::DELETE_IO_CQ
        );
        assert_eq!(SubmissionEntry::get_features(7).dw[10], 7);
    }

    #[test]
    fn dsm_range_round_trips() {
        let r = DsmRange {
            attributes: 0,
            blocks: 77,
            slba: 0xdead_beef_0000,
        };
        let b = r.to_bytes();
        assert_eq!(&b[4..8], &77u32.to_le_bytes());
        assert_eq!(DsmRange::from_bytes(&b), r);
    }
}
