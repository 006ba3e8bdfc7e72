//! Identify data structures (NVMe 1.4, 5.15), parsed through checked
//! constructors: after `parse` succeeds every field the driver uses is in
//! range, so nothing downstream needs to re-check device-supplied values.

use core::fmt;

/// Size of every Identify data structure.
pub const IDENTIFY_SIZE: usize = 4096;

/// Why identify data was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdentifyError {
    /// The buffer is not 4096 bytes.
    Length,
    /// SQES/CQES do not allow 64/16-byte entries.
    EntrySizes,
    /// The controller reports no namespaces.
    NoNamespaces,
    /// NLBAF or FLBAS name a format that does not exist.
    BadFormatIndex,
    /// The active LBA format's blocks are not 512 or 4096 bytes.
    UnsupportedFormat,
    /// The active LBA format carries metadata the driver cannot use:
    /// anything but none, or exactly the 8-byte protection information
    /// (which the controller inserts and strips, `spec::protection`).
    Metadata {
        /// Metadata bytes per block (LBAF.MS).
        bytes: u16,
    },
    /// The protection information settings are reserved (DPS type 4-7),
    /// contradict the format (a PI type with no metadata) or name a type
    /// DPC says the namespace does not support.
    ProtectionType,
    /// Namespace size is zero or larger than its capacity allows.
    BadSize,
}

impl core::error::Error for IdentifyError {}

impl fmt::Display for IdentifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            IdentifyError::Length => "identify data has the wrong length",
            IdentifyError::EntrySizes => "controller does not support 64/16-byte queue entries",
            IdentifyError::NoNamespaces => "controller reports no namespaces",
            IdentifyError::BadFormatIndex => "namespace LBA format index out of range",
            IdentifyError::UnsupportedFormat => "namespace block size is not 512 or 4096 bytes",
            IdentifyError::Metadata { bytes } => {
                return write!(
                    f,
                    "namespace is formatted with {bytes} bytes of metadata per block, \
                     which the driver cannot use (it takes none, or exactly the 8-byte \
                     protection information)"
                );
            }
            IdentifyError::ProtectionType => {
                "namespace protection information settings are invalid"
            }
            IdentifyError::BadSize => "namespace size is invalid",
        };
        f.write_str(s)
    }
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    match b.get(off..off + 2) {
        Some(&[x, y]) => u16::from_le_bytes([x, y]),
        _ => 0,
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    match b.get(off..off + 4) {
        Some(&[a, c, d, e]) => u32::from_le_bytes([a, c, d, e]),
        _ => 0,
    }
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from(u32_at(b, off)) | (u64::from(u32_at(b, off + 4)) << 32)
}

fn byte_at(b: &[u8], off: usize) -> u8 {
    b.get(off).copied().unwrap_or(0)
}

/// Identify Controller data (5.15, CNS 01h): the fields we use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdentifyController {
    /// PCI Vendor ID.
    pub vid: u16,
    /// Serial number (ASCII, space padded).
    pub serial: [u8; 20],
    /// Model number (ASCII, space padded).
    pub model: [u8; 40],
    /// Firmware revision.
    pub firmware: [u8; 8],
    /// Maximum Data Transfer Size as a power of two of CAP.MPSMIN pages;
    /// 0 means no limit.
    pub mdts: u8,
    /// Controller ID.
    pub cntlid: u16,
    /// Number of namespaces (highest valid NSID).
    pub nn: u32,
    /// Optional NVM Command Support.
    pub oncs: u16,
    /// Volatile Write Cache present.
    pub vwc: bool,
    /// I/O Queue Command Capsule Supported Size, in 16-byte units (bytes
    /// 1795:1792, fabrics only; 0 on PCIe): the largest command capsule,
    /// 64-byte entry plus in-capsule data, an I/O queue accepts.
    pub ioccsz: u32,
}

impl IdentifyController {
    /// ONCS bit 2: Dataset Management supported.
    pub fn supports_dsm(&self) -> bool {
        self.oncs & (1 << 2) != 0
    }
    /// ONCS bit 3: Write Zeroes supported.
    pub fn supports_write_zeroes(&self) -> bool {
        self.oncs & (1 << 3) != 0
    }
    /// Maximum transfer in bytes for a minimum page size of `1 << mps_shift`,
    /// capped at `cap` (also used when MDTS is 0, "no limit").
    pub fn max_transfer(&self, mps_shift: u32, cap: u64) -> u64 {
        if self.mdts == 0 {
            return cap;
        }
        let shift = u32::from(self.mdts).saturating_add(mps_shift);
        if shift >= 63 {
            return cap;
        }
        (1u64 << shift).min(cap)
    }
    /// Parses and checks a 4096-byte buffer.
    pub fn parse(b: &[u8]) -> Result<IdentifyController, IdentifyError> {
        if b.len() != IDENTIFY_SIZE {
            return Err(IdentifyError::Length);
        }
        let sqes = byte_at(b, 512);
        let cqes = byte_at(b, 513);
        // Required (low nibble) must be <= 6 / 4 and maximum >= 6 / 4.
        let sq_ok = (sqes & 0xf) <= 6 && (sqes >> 4) >= 6;
        let cq_ok = (cqes & 0xf) <= 4 && (cqes >> 4) >= 4;
        if !sq_ok || !cq_ok {
            return Err(IdentifyError::EntrySizes);
        }
        let nn = u32_at(b, 516);
        if nn == 0 {
            return Err(IdentifyError::NoNamespaces);
        }
        let mut serial = [0u8; 20];
        serial.copy_from_slice(b.get(4..24).ok_or(IdentifyError::Length)?);
        let mut model = [0u8; 40];
        model.copy_from_slice(b.get(24..64).ok_or(IdentifyError::Length)?);
        let mut firmware = [0u8; 8];
        firmware.copy_from_slice(b.get(64..72).ok_or(IdentifyError::Length)?);
        Ok(IdentifyController {
            vid: u16_at(b, 0),
            serial,
            model,
            firmware,
            mdts: byte_at(b, 77),
            cntlid: u16_at(b, 78),
            nn,
            oncs: u16_at(b, 520),
            vwc: byte_at(b, 525) & 1 != 0,
            ioccsz: u32_at(b, 1792),
        })
    }
    /// Encodes the fields back into a 4096-byte structure (for the emulated
    /// controller), with SQES/CQES advertising 64/16-byte entries.
    pub fn encode(&self, out: &mut [u8; IDENTIFY_SIZE]) {
        out.fill(0);
        out[0..2].copy_from_slice(&self.vid.to_le_bytes());
        out[4..24].copy_from_slice(&self.serial);
        out[24..64].copy_from_slice(&self.model);
        out[64..72].copy_from_slice(&self.firmware);
        out[77] = self.mdts;
        out[78..80].copy_from_slice(&self.cntlid.to_le_bytes());
        out[80..84].copy_from_slice(&0x0001_0400u32.to_le_bytes());
        out[512] = 0x66;
        out[513] = 0x44;
        out[516..520].copy_from_slice(&self.nn.to_le_bytes());
        out[520..522].copy_from_slice(&self.oncs.to_le_bytes());
        out[525] = u8::from(self.vwc);
        out[1792..1796].copy_from_slice(&self.ioccsz.to_le_bytes());
    }
}

/// Identify Namespace data (5.15, CNS 00h): size and active format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdentifyNamespace {
    /// Namespace Size in logical blocks.
    pub nsze: u64,
    /// Namespace Capacity in logical blocks.
    pub ncap: u64,
    /// Logical block size in bytes of the active format (512 or 4096).
    pub block_size: u32,
}

impl IdentifyNamespace {
    /// Parses and checks a 4096-byte buffer: the active LBA format must
    /// exist and be 512 or 4096 bytes, with no metadata or with exactly the
    /// 8-byte protection information (read with
    /// [`Protection::parse`](super::protection::Protection::parse)).
    pub fn parse(b: &[u8]) -> Result<IdentifyNamespace, IdentifyError> {
        if b.len() != IDENTIFY_SIZE {
            return Err(IdentifyError::Length);
        }
        let nsze = u64_at(b, 0);
        let ncap = u64_at(b, 8);
        let nlbaf = byte_at(b, 25);
        let flbas = byte_at(b, 26);
        let index = flbas & 0xf;
        if nlbaf > 15 || index > nlbaf {
            return Err(IdentifyError::BadFormatIndex);
        }
        let lbaf = u32_at(b, 128 + 4 * usize::from(index));
        let lbads = (lbaf >> 16) & 0xff;
        if !(lbads == 9 || lbads == 12) {
            return Err(IdentifyError::UnsupportedFormat);
        }
        super::protection::Protection::parse(b)?;
        if nsze == 0 || ncap > nsze {
            return Err(IdentifyError::BadSize);
        }
        Ok(IdentifyNamespace {
            nsze,
            ncap,
            block_size: 1 << lbads,
        })
    }
    /// Encodes a namespace with one LBA format (for the emulated controller).
    pub fn encode(&self, out: &mut [u8; IDENTIFY_SIZE]) {
        out.fill(0);
        out[0..8].copy_from_slice(&self.nsze.to_le_bytes());
        out[8..16].copy_from_slice(&self.ncap.to_le_bytes());
        out[16..24].copy_from_slice(&self.nsze.to_le_bytes());
        let lbads = self.block_size.trailing_zeros();
        out[128..132].copy_from_slice(&(lbads << 16).to_le_bytes());
    }
}

/// Parses an Active Namespace ID list (5.15, CNS 02h): ascending NSIDs ended by
/// zero; returns whether `nsid` is active.
pub fn active_list_contains(b: &[u8], nsid: u32) -> bool {
    b.chunks_exact(4)
        .map(|c| u32_at(c, 0))
        .take_while(|&id| id != 0)
        .any(|id| id == nsid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctrl() -> IdentifyController {
        IdentifyController {
            vid: 0x1b36,
            serial: [b'1'; 20],
            model: [b'm'; 40],
            firmware: [b'f'; 8],
            mdts: 5,
            cntlid: 1,
            nn: 1,
            oncs: 0b1100,
            vwc: true,
            ioccsz: 1028,
        }
    }

    #[test]
    fn controller_round_trips_and_checks() {
        let mut buf = [0u8; IDENTIFY_SIZE];
        ctrl().encode(&mut buf);
        let c = IdentifyController::parse(&buf).unwrap();
        assert_eq!(c, ctrl());
        assert!(c.supports_dsm() && c.supports_write_zeroes());
        assert_eq!(c.max_transfer(12, 1 << 30), 128 * 1024);
        assert_eq!(
            IdentifyController { mdts: 0, ..c }.max_transfer(12, 1 << 20),
            1 << 20
        );
        assert_eq!(
            IdentifyController { mdts: 255, ..c }.max_transfer(12, 1 << 20),
            1 << 20
        );
        buf[512] = 0x55;
        assert_eq!(
            IdentifyController::parse(&buf),
            Err(IdentifyError::EntrySizes)
        );
        buf[512] = 0x66;
        buf[516..520].fill(0);
        assert_eq!(
            IdentifyController::parse(&buf),
            Err(IdentifyError::NoNamespaces)
        );
        assert_eq!(
            IdentifyController::parse(&buf[..100]),
            Err(IdentifyError::Length)
        );
    }

    #[test]
    fn namespace_format_is_validated() {
        let ns = IdentifyNamespace {
            nsze: 1000,
            ncap: 1000,
            block_size: 4096,
        };
        let mut buf = [0u8; IDENTIFY_SIZE];
        ns.encode(&mut buf);
        assert_eq!(IdentifyNamespace::parse(&buf), Ok(ns));
        buf[26] = 1;
        assert_eq!(
            IdentifyNamespace::parse(&buf),
            Err(IdentifyError::BadFormatIndex)
        );
        buf[26] = 0;
        buf[128] = 8; // 8 bytes of metadata, no protection information
        assert_eq!(
            IdentifyNamespace::parse(&buf),
            Err(IdentifyError::Metadata { bytes: 8 })
        );
        buf[29] = 1; // ... and as PI type 1, which DPC must offer
        buf[28] = 1;
        assert_eq!(IdentifyNamespace::parse(&buf), Ok(ns));
        buf[28] = 0;
        buf[29] = 0;
        buf[128] = 0;
        buf[130] = 10; // 1 KiB blocks
        assert_eq!(
            IdentifyNamespace::parse(&buf),
            Err(IdentifyError::UnsupportedFormat)
        );
        buf[130] = 9;
        buf[0..8].fill(0);
        assert_eq!(IdentifyNamespace::parse(&buf), Err(IdentifyError::BadSize));
        let mut list = [0u8; 16];
        list[0..4].copy_from_slice(&1u32.to_le_bytes());
        list[4..8].copy_from_slice(&5u32.to_le_bytes());
        assert!(active_list_contains(&list, 5));
        assert!(!active_list_contains(&list, 2));
    }
}
