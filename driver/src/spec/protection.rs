//! End-to-end data protection (NVMe 1.4, 8.3 "End-to-end Data
//! Protection"): how a namespace is formatted with protection information
//! (PI), the 8-byte PI tuple, the PRINFO bits of Read, Write and Write
//! Zeroes, and the status codes of a failed check.
//!
//! A namespace may be formatted with metadata beside each logical block
//! (Identify Namespace: LBAF.MS bytes, in the data buffer after each block
//! when FLBAS bit 4 says "extended", else in a separate buffer). When DPS
//! names a PI type, 8 bytes of that metadata are the PI tuple (in the
//! first or the last 8 bytes, DPS bit 3): a 16-bit guard (CRC-16 T10-DIF
//! of the block's data), a 16-bit application tag and a 32-bit reference
//! tag (type 1: the low 32 bits of the LBA; type 2: from the command, one
//! more per block; type 3: not checked), all big-endian.
//!
//! # What pollfs uses: PRACT = 1
//!
//! The driver accepts a namespace with no metadata, or with exactly the
//! 8-byte PI as its metadata (`MS = 8`, types 1, 2 and 3), and sends every
//! Read, Write and Write Zeroes on the latter with PRACT = 1 (the
//! controller inserts the PI on a write and strips it on a read, so no
//! metadata crosses the bus and the page cache's 4 KiB frames stay what
//! they are) and PRCHK = guard, plus the reference tag on types 1 and 2
//! (Write Zeroes, which has no data to check, with PRACT alone), with the
//! first block's reference tag (ILBRT) set to the low 32 bits of the
//! starting LBA. The controller then checks, on every read, that the
//! block's stored guard matches its data and its stored reference tag
//! matches the LBA asked for: a block corrupted on the medium or in the
//! controller's path to it, and a read served from the wrong block (a
//! misdirected read, whose PI names the other LBA) fail with an End-to-end
//! check error ([`PiCheck`]) instead of returning wrong bytes.
//!
//! The other choice, PRACT = 0, has the host compute the guard (CRC-16
//! T10-DIF, [`guard`]) and tags on every write and check them on every
//! read, with the PI moving in a metadata buffer (or interleaved with the
//! data, which 4 KiB page-cache frames cannot be). It covers the PCIe
//! link, the controller's DMA and host memory as well, at a CRC over every
//! byte moved (a few hundred cycles per 4 KiB even with a carry-less
//! multiply) and a metadata buffer per command. PRACT = 1 costs the host
//! two dword stores per command and nothing per byte; the PCIe link has
//! its own link CRC, and the engine's own checksums (issue 33) are the
//! answer for end-to-end coverage of file data. A namespace formatted with
//! any other metadata (more than the PI, or metadata without PI) is
//! refused by name at bring-up ([`IdentifyError::Metadata`]): the driver
//! moves no metadata, and misusing such a format would write data the
//! controller pairs with metadata nobody set.

use core::fmt;

use crc::{Crc, CRC_16_T10_DIF};
use pollfs_core::dev::DevError;

use super::identify::{IdentifyError, IDENTIFY_SIZE};
use super::status::{media, Status, StatusType};

/// Bytes of one PI tuple with a 16-bit guard.
pub const PI_SIZE: u16 = 8;

/// PRINFO bits of CDW12 of Read, Write and Write Zeroes (NVM command set,
/// "Protection Information Field").
pub mod prinfo {
    /// PRACT: the controller inserts PI on a write and strips it on a
    /// read (with an 8-byte metadata format, no metadata is transferred).
    pub const PRACT: u32 = 1 << 29;
    /// PRCHK bit 2: check the guard.
    pub const CHECK_GUARD: u32 = 1 << 28;
    /// PRCHK bit 1: check the application tag (against LBAT/LBATM, CDW15).
    pub const CHECK_APP_TAG: u32 = 1 << 27;
    /// PRCHK bit 0: check the reference tag (against ILBRT, CDW14).
    pub const CHECK_REF_TAG: u32 = 1 << 26;
    /// All four bits.
    pub const MASK: u32 = PRACT | CHECK_GUARD | CHECK_APP_TAG | CHECK_REF_TAG;
}

/// Invalid Protection Information (Command Specific Status 81h of Read,
/// Write and Write Zeroes): PRINFO or ILBRT do not fit the format.
pub const INVALID_PROTECTION_INFO: u8 = 0x81;

/// Which end-to-end check failed: the named I/O error a protected
/// namespace reports instead of returning wrong bytes. The engine sees
/// it as [`DevError::Status`] with the controller's code (`0x282`,
/// `0x283`, `0x284`), which [`PiCheck::of`] names again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PiCheck {
    /// The data does not match its guard: corrupted data or PI.
    Guard,
    /// The application tag does not match.
    AppTag,
    /// The reference tag does not match: the block came from, or went
    /// to, another LBA than the one asked for.
    RefTag,
}

impl PiCheck {
    /// The check a completion status reports, if it is one.
    pub fn from_status(s: Status) -> Option<PiCheck> {
        if s.sct != StatusType::Media {
            return None;
        }
        match s.sc {
            media::GUARD_CHECK => Some(PiCheck::Guard),
            media::APP_TAG_CHECK => Some(PiCheck::AppTag),
            media::REF_TAG_CHECK => Some(PiCheck::RefTag),
            _ => None,
        }
    }
    /// The check an engine-level error stands for, if it is one.
    pub fn of(e: DevError) -> Option<PiCheck> {
        match e {
            DevError::Status(code) if code >> 8 == u16::from(StatusType::Media.bits()) => {
                PiCheck::from_status(Status::new(StatusType::Media, code as u8, false))
            }
            _ => None,
        }
    }
    /// The status code (type Media).
    pub fn code(self) -> u8 {
        match self {
            PiCheck::Guard => media::GUARD_CHECK,
            PiCheck::AppTag => media::APP_TAG_CHECK,
            PiCheck::RefTag => media::REF_TAG_CHECK,
        }
    }
    /// The status a controller reports for this check.
    pub fn status(self) -> Status {
        Status::new(StatusType::Media, self.code(), false)
    }
}

impl fmt::Display for PiCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PiCheck::Guard => "end-to-end guard check error (data does not match its CRC)",
            PiCheck::AppTag => "end-to-end application tag check error",
            PiCheck::RefTag => {
                "end-to-end reference tag check error (the block belongs to another LBA)"
            }
        })
    }
}

impl core::error::Error for PiCheck {}

/// Protection information type (DPS bits 2:0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PiType {
    /// Type 1: the reference tag is the low 32 bits of the LBA.
    Type1,
    /// Type 2: the reference tag starts at the command's ILBRT.
    Type2,
    /// Type 3: the reference tag is not checked.
    Type3,
}

impl PiType {
    /// From DPS bits 2:0; `Ok(None)` for no protection.
    fn from_dps(dps: u8) -> Result<Option<PiType>, IdentifyError> {
        match dps & 7 {
            0 => Ok(None),
            1 => Ok(Some(PiType::Type1)),
            2 => Ok(Some(PiType::Type2)),
            3 => Ok(Some(PiType::Type3)),
            _ => Err(IdentifyError::ProtectionType),
        }
    }
    /// DPS bits 2:0.
    pub fn bits(self) -> u8 {
        match self {
            PiType::Type1 => 1,
            PiType::Type2 => 2,
            PiType::Type3 => 3,
        }
    }
}

/// A namespace formatted with 8 bytes of metadata, all of them PI: what
/// the driver needs to send its commands, read from Identify Namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Protection {
    /// The PI type.
    pub pi_type: PiType,
    /// FLBAS bit 4: metadata is transferred after each block's data (an
    /// extended LBA) rather than in a separate buffer. With PRACT = 1 and
    /// 8 bytes of metadata neither is transferred, so the driver sends
    /// the same commands for both.
    pub extended: bool,
    /// DPS bit 3: the PI is the first 8 bytes of the metadata rather than
    /// the last (the same 8 bytes here, where the metadata is the PI).
    pub first_eight: bool,
}

/// Identify Namespace byte offsets (5.15, Figure "Identify Namespace Data
/// Structure"): FLBAS, MC, DPC, DPS and the LBA Format list.
mod at {
    pub const NLBAF: usize = 25;
    pub const FLBAS: usize = 26;
    pub const MC: usize = 27;
    pub const DPC: usize = 28;
    pub const DPS: usize = 29;
    pub const LBAF: usize = 128;
}

impl Protection {
    /// Reads the active format's metadata from Identify Namespace data
    /// (NLBAF and FLBAS already checked by the caller): `Ok(None)` for a
    /// format without metadata, the PI for an 8-byte PI format, and an
    /// error naming what the driver cannot handle otherwise.
    pub fn parse(b: &[u8]) -> Result<Option<Protection>, IdentifyError> {
        if b.len() != IDENTIFY_SIZE {
            return Err(IdentifyError::Length);
        }
        let flbas = b[at::FLBAS];
        let index = usize::from(flbas & 0xf);
        let lbaf_at = at::LBAF + 4 * index;
        let ms = u16::from_le_bytes([b[lbaf_at], b[lbaf_at + 1]]);
        let dps = b[at::DPS];
        let pi_type = PiType::from_dps(dps)?;
        match (ms, pi_type) {
            (0, None) => Ok(None),
            (0, Some(_)) => Err(IdentifyError::ProtectionType),
            (PI_SIZE, Some(pi_type)) => {
                // DPC says which types the namespace supports; a type in
                // force that DPC does not list is a contradiction.
                let dpc = b[at::DPC];
                if dpc & (1 << (pi_type.bits() - 1)) == 0 {
                    return Err(IdentifyError::ProtectionType);
                }
                Ok(Some(Protection {
                    pi_type,
                    extended: flbas & (1 << 4) != 0,
                    first_eight: dps & (1 << 3) != 0,
                }))
            }
            (ms, _) => Err(IdentifyError::Metadata { bytes: ms }),
        }
    }

    /// The PRINFO bits for every Read and Write: the controller inserts
    /// and strips the PI, and checks the guard, and the reference tag
    /// where the type has one.
    pub fn prinfo(&self) -> u32 {
        let refs = match self.pi_type {
            PiType::Type1 | PiType::Type2 => prinfo::CHECK_REF_TAG,
            PiType::Type3 => 0,
        };
        prinfo::PRACT | prinfo::CHECK_GUARD | refs
    }

    /// The PRINFO bits for Write Zeroes: PRACT only (the controller
    /// writes PI for the zeroes, reference tags from ILBRT). It has no
    /// data to check, and QEMU's controller refuses any PRCHK bit on it
    /// with Invalid Protection Information.
    pub fn write_zeroes_prinfo(&self) -> u32 {
        prinfo::PRACT
    }

    /// Writes the active format of Identify Namespace data (LBA format 0
    /// as `encode` leaves it) as formatted with `ms` bytes of metadata,
    /// `extended` or not, and `dps` (type and location, raw, so a test
    /// controller can report formats the driver refuses), with DPC and MC
    /// claiming support for them.
    pub fn encode_format(out: &mut [u8; IDENTIFY_SIZE], ms: u16, extended: bool, dps: u8) {
        out[at::NLBAF] = 0;
        out[at::FLBAS] = (out[at::FLBAS] & 0x0f) | (u8::from(extended) << 4);
        out[at::LBAF..at::LBAF + 2].copy_from_slice(&ms.to_le_bytes());
        // MC: metadata in an extended LBA (bit 0) and in a separate
        // buffer (bit 1). DPC: types 1-3, first or last eight bytes.
        out[at::MC] = if ms > 0 { 0b11 } else { 0 };
        out[at::DPC] = if dps & 7 != 0 { 0b1_1111 } else { 0 };
        out[at::DPS] = dps;
    }
}

/// One PI tuple with a 16-bit guard, as stored beside a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PiTuple {
    /// CRC-16 T10-DIF of the block's data.
    pub guard: u16,
    /// Application tag.
    pub app_tag: u16,
    /// Reference tag.
    pub ref_tag: u32,
}

impl PiTuple {
    /// A tuple of all ones: the PI of a block never written or
    /// deallocated, which every check skips (an application tag of FFFFh
    /// disables checking on types 1 and 2, and with a reference tag of
    /// FFFFFFFFh on type 3).
    pub const UNWRITTEN: PiTuple = PiTuple {
        guard: 0xffff,
        app_tag: 0xffff,
        ref_tag: 0xffff_ffff,
    };
    /// The 8 bytes, big-endian fields.
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0..2].copy_from_slice(&self.guard.to_be_bytes());
        b[2..4].copy_from_slice(&self.app_tag.to_be_bytes());
        b[4..8].copy_from_slice(&self.ref_tag.to_be_bytes());
        b
    }
    /// From 8 bytes.
    pub fn from_bytes(b: [u8; 8]) -> PiTuple {
        let [g0, g1, a0, a1, r0, r1, r2, r3] = b;
        PiTuple {
            guard: u16::from_be_bytes([g0, g1]),
            app_tag: u16::from_be_bytes([a0, a1]),
            ref_tag: u32::from_be_bytes([r0, r1, r2, r3]),
        }
    }
    /// The tuple for `data` with application tag `app_tag` and reference
    /// tag `ref_tag`.
    pub fn generate(data: &[u8], app_tag: u16, ref_tag: u32) -> PiTuple {
        PiTuple {
            guard: guard(data),
            app_tag,
            ref_tag,
        }
    }
    /// Whether checks are disabled for this tuple on a namespace of
    /// `pi_type` (8.3.1: an application tag of FFFFh, and on type 3 a
    /// reference tag of FFFFFFFFh as well).
    pub fn checks_disabled(&self, pi_type: PiType) -> bool {
        match pi_type {
            PiType::Type1 | PiType::Type2 => self.app_tag == 0xffff,
            PiType::Type3 => self.app_tag == 0xffff && self.ref_tag == 0xffff_ffff,
        }
    }
    /// Checks the tuple stored with `data` as a controller does under
    /// `prinfo` (PRCHK bits): the guard against the data, the application
    /// tag against `app_tag` under `app_mask`, the reference tag against
    /// `ref_tag` (types 1 and 2). The first check that fails, in that
    /// order.
    pub fn check(
        &self,
        data: &[u8],
        pi_type: PiType,
        prinfo_bits: u32,
        (app_tag, app_mask): (u16, u16),
        ref_tag: u32,
    ) -> Result<(), PiCheck> {
        if self.checks_disabled(pi_type) {
            return Ok(());
        }
        if prinfo_bits & prinfo::CHECK_GUARD != 0 && self.guard != guard(data) {
            return Err(PiCheck::Guard);
        }
        if prinfo_bits & prinfo::CHECK_APP_TAG != 0 && (self.app_tag ^ app_tag) & app_mask != 0 {
            return Err(PiCheck::AppTag);
        }
        let has_ref = matches!(pi_type, PiType::Type1 | PiType::Type2);
        if has_ref && prinfo_bits & prinfo::CHECK_REF_TAG != 0 && self.ref_tag != ref_tag {
            return Err(PiCheck::RefTag);
        }
        Ok(())
    }
}

const T10_DIF: Crc<u16> = Crc::<u16>::new(&CRC_16_T10_DIF);

/// The guard of a block: CRC-16 T10-DIF (polynomial 8BB7h, initial value
/// 0, no reflection, no final XOR) of its data.
pub fn guard(data: &[u8]) -> u16 {
    T10_DIF.checksum(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::identify::IdentifyNamespace;

    fn page(ms: u16, extended: bool, dps: u8) -> [u8; IDENTIFY_SIZE] {
        let mut b = [0u8; IDENTIFY_SIZE];
        IdentifyNamespace {
            nsze: 64,
            ncap: 64,
            block_size: 4096,
        }
        .encode(&mut b);
        Protection::encode_format(&mut b, ms, extended, dps);
        b
    }

    #[test]
    fn guard_is_crc16_t10_dif() {
        // The CRC catalogue's check value for "123456789".
        assert_eq!(guard(b"123456789"), 0xd0db);
        assert_eq!(guard(&[0u8; 4096]), 0);
    }

    #[test]
    fn formats_are_read_and_the_unusable_ones_refused_by_name() {
        assert_eq!(Protection::parse(&page(0, false, 0)), Ok(None));
        let p = Protection::parse(&page(8, false, 1)).unwrap().unwrap();
        assert_eq!(p.pi_type, PiType::Type1);
        assert!(!p.extended && !p.first_eight);
        assert_eq!(
            p.prinfo(),
            prinfo::PRACT | prinfo::CHECK_GUARD | prinfo::CHECK_REF_TAG
        );
        assert_eq!(p.write_zeroes_prinfo(), prinfo::PRACT);
        let p = Protection::parse(&page(8, true, 3 | 8)).unwrap().unwrap();
        assert_eq!(p.pi_type, PiType::Type3);
        assert!(p.extended && p.first_eight);
        assert_eq!(p.prinfo(), prinfo::PRACT | prinfo::CHECK_GUARD);
        let p = Protection::parse(&page(8, false, 2)).unwrap().unwrap();
        assert_eq!(p.pi_type, PiType::Type2);
        // Metadata without PI, or more metadata than the PI.
        assert_eq!(
            Protection::parse(&page(8, false, 0)),
            Err(IdentifyError::Metadata { bytes: 8 })
        );
        assert_eq!(
            Protection::parse(&page(16, true, 1)),
            Err(IdentifyError::Metadata { bytes: 16 })
        );
        assert_eq!(
            Protection::parse(&page(8, false, 5)),
            Err(IdentifyError::ProtectionType)
        );
        assert_eq!(
            Protection::parse(&page(0, false, 1)),
            Err(IdentifyError::ProtectionType)
        );
        let mut b = page(8, false, 2);
        b[at::DPC] = 0b1; // type 1 only, type 2 in force
        assert_eq!(Protection::parse(&b), Err(IdentifyError::ProtectionType));
        assert_eq!(Protection::parse(&b[..64]), Err(IdentifyError::Length));
    }

    #[test]
    fn tuples_round_trip_and_check() {
        let data = [0x5au8; 512];
        let t = PiTuple::generate(&data, 0, 77);
        assert_eq!(PiTuple::from_bytes(t.to_bytes()), t);
        assert_eq!(&t.to_bytes()[4..8], &[0, 0, 0, 77], "big-endian");
        let all = prinfo::CHECK_GUARD | prinfo::CHECK_APP_TAG | prinfo::CHECK_REF_TAG;
        assert_eq!(t.check(&data, PiType::Type1, all, (0, 0xffff), 77), Ok(()));
        let mut bad = data;
        bad[100] ^= 1;
        assert_eq!(
            t.check(&bad, PiType::Type1, all, (0, 0xffff), 77),
            Err(PiCheck::Guard)
        );
        assert_eq!(t.check(&bad, PiType::Type1, 0, (0, 0), 77), Ok(()));
        assert_eq!(
            t.check(&data, PiType::Type1, all, (0, 0xffff), 78),
            Err(PiCheck::RefTag)
        );
        assert_eq!(t.check(&data, PiType::Type3, all, (0, 0xffff), 78), Ok(()));
        assert_eq!(
            t.check(&data, PiType::Type2, all, (1, 0xffff), 77),
            Err(PiCheck::AppTag)
        );
        assert_eq!(t.check(&data, PiType::Type2, all, (1, 0), 77), Ok(()));
        assert_eq!(
            PiTuple::UNWRITTEN.check(&bad, PiType::Type1, all, (0, 0xffff), 5),
            Ok(())
        );
    }

    #[test]
    fn check_errors_are_named_from_status_and_from_the_engine_error() {
        for c in [PiCheck::Guard, PiCheck::AppTag, PiCheck::RefTag] {
            assert_eq!(PiCheck::from_status(c.status()), Some(c));
            let e = c.status().to_result().unwrap_err();
            assert_eq!(e, DevError::Status(0x200 | u16::from(c.code())));
            assert_eq!(PiCheck::of(e), Some(c));
        }
        assert_eq!(PiCheck::of(DevError::Media), None);
        assert_eq!(PiCheck::of(DevError::Status(0x0082)), None);
        assert_eq!(
            PiCheck::from_status(Status::new(StatusType::Media, 0x81, true)),
            None
        );
    }
}
