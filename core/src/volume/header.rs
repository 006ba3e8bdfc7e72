//! The mirror header: one 4 KiB block at the end of every leg, in two
//! copies, saying which mirror the leg belongs to and which legs were in
//! sync when it was written.
//!
//! ```text
//! offset size field
//!      0    8 magic "PFSMIRR\0"
//!      8    4 version (1)
//!     12    4 logical block size of the legs
//!     16    8 mirror id (chosen at creation)
//!     24    8 generation: +1 for every change of the table below, of the
//!             dirty flag, or of the legs' membership
//!     32    8 data blocks: the mirror's capacity, in logical blocks
//!     40    1 leg count (1..=8)
//!     41    1 this leg's position
//!     42    1 flags: bit 0 dirty (opened for writing and not closed since)
//!     43    1 zero
//!     44    8 leg table: one state per position (0 in sync, 1 stale,
//!             2 failed); positions past the leg count are 0
//!     52    4 zero
//!     56    4 CRC-32C of bytes 0..56
//!     60 4036 zero
//! ```
//!
//! The two copies live in the leg's last two pages: a header of generation
//! `g` goes to copy `g % 2`, so a write torn by a crash leaves the other
//! copy, one generation older, intact. The leg's data is every page before
//! them, at the same addresses as on the mirror: one leg alone holds a
//! plain pollfs image.
//!
//! All integers are little-endian.

use crate::persist::format::crc32c;
use crate::units::PAGE_SIZE;

use super::MAX_LEGS;

/// The header's magic bytes.
pub const MAGIC: [u8; 8] = *b"PFSMIRR\0";
/// The format version written and read.
pub const VERSION: u32 = 1;
/// Bytes the header fields take (the rest of the block is zero).
pub const LEN: usize = 60;
/// Pages at the end of every leg kept for the two header copies.
pub const PAGES: u64 = 2;

const _: () = assert!(LEN <= PAGE_SIZE);
const _: () = assert!(44 + MAX_LEGS + 4 + 4 == LEN);

/// A leg's state as a header records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Holds every write the mirror completed.
    InSync,
    /// Missed writes, or was not yet copied: must be resynced before it
    /// is read.
    Stale,
    /// Failed a write or flush and was dropped.
    Failed,
}

impl Recorded {
    fn byte(self) -> u8 {
        match self {
            Recorded::InSync => 0,
            Recorded::Stale => 1,
            Recorded::Failed => 2,
        }
    }
    fn from_byte(b: u8) -> Option<Recorded> {
        match b {
            0 => Some(Recorded::InSync),
            1 => Some(Recorded::Stale),
            2 => Some(Recorded::Failed),
            _ => None,
        }
    }
}

/// A decoded mirror header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Logical block size of the legs.
    pub block_size: u32,
    /// The mirror's identity.
    pub uuid: u64,
    /// Which change of the mirror's state this is.
    pub generation: u64,
    /// The mirror's capacity in logical blocks.
    pub data_blocks: u64,
    /// Number of legs.
    pub legs: u8,
    /// The position of the leg holding this copy.
    pub index: u8,
    /// Opened for writing and not closed since: legs in sync may differ in
    /// writes that were under way.
    pub dirty: bool,
    /// Every leg's state, by position (`legs` entries used).
    pub table: [Recorded; MAX_LEGS],
}

/// Why a block is not a usable header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderError {
    /// Not a mirror header at all.
    Magic,
    /// The checksum does not match.
    Checksum,
    /// Written by another version of the format.
    Version(u32),
    /// A field is out of range.
    Field(&'static str),
}

fn u32_at(b: &[u8; LEN], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

fn u64_at(b: &[u8; LEN], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

impl Header {
    /// The header as its first [`LEN`] bytes (the rest of its block is
    /// zero).
    pub fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.block_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.uuid.to_le_bytes());
        b[24..32].copy_from_slice(&self.generation.to_le_bytes());
        b[32..40].copy_from_slice(&self.data_blocks.to_le_bytes());
        b[40] = self.legs;
        b[41] = self.index;
        b[42] = u8::from(self.dirty);
        for (i, s) in self.table.iter().enumerate() {
            b[44 + i] = if i < usize::from(self.legs) {
                s.byte()
            } else {
                0
            };
        }
        let crc = crc32c(&[&b[..56]]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes the start of a header block, checking everything: after
    /// this, no field is out of range.
    pub fn decode(block: &[u8]) -> Result<Header, HeaderError> {
        let b: &[u8; LEN] = block
            .get(..LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or(HeaderError::Field("short block"))?;
        if b[0..8] != MAGIC {
            return Err(HeaderError::Magic);
        }
        if u32_at(b, 56) != crc32c(&[&b[..56]]) {
            return Err(HeaderError::Checksum);
        }
        let version = u32_at(b, 8);
        if version != VERSION {
            return Err(HeaderError::Version(version));
        }
        let block_size = u32_at(b, 12);
        if block_size != 512 && block_size != 4096 {
            return Err(HeaderError::Field("block size"));
        }
        let (legs, index) = (b[40], b[41]);
        if legs == 0 || usize::from(legs) > MAX_LEGS {
            return Err(HeaderError::Field("leg count"));
        }
        if index >= legs {
            return Err(HeaderError::Field("leg position"));
        }
        if b[42] > 1 || b[43] != 0 || b[52..56] != [0; 4] {
            return Err(HeaderError::Field("flags"));
        }
        let mut table = [Recorded::InSync; MAX_LEGS];
        for (i, t) in table.iter_mut().enumerate() {
            *t = Recorded::from_byte(b[44 + i]).ok_or(HeaderError::Field("leg state"))?;
            if i >= usize::from(legs) && *t != Recorded::InSync {
                return Err(HeaderError::Field("leg state past the leg count"));
            }
        }
        let data_blocks = u64_at(b, 32);
        let per_page = (PAGE_SIZE as u32 / block_size) as u64;
        if data_blocks == 0 || data_blocks % per_page != 0 {
            return Err(HeaderError::Field("data blocks"));
        }
        Ok(Header {
            block_size,
            uuid: u64_at(b, 16),
            generation: u64_at(b, 24),
            data_blocks,
            legs,
            index,
            dirty: b[42] == 1,
            table,
        })
    }

    /// The header copy's page on a leg of `leg_pages` pages (copy
    /// `generation % 2` of the last two).
    pub fn page(leg_pages: u64, generation: u64) -> u64 {
        leg_pages - PAGES + generation % 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        let mut table = [Recorded::InSync; MAX_LEGS];
        table[1] = Recorded::Failed;
        table[2] = Recorded::Stale;
        Header {
            block_size: 512,
            uuid: 0x1234_5678_9abc_def0,
            generation: 77,
            data_blocks: 8 * 1000,
            legs: 3,
            index: 2,
            dirty: true,
            table,
        }
    }

    #[test]
    fn headers_round_trip_and_sit_in_alternating_copies() {
        let h = sample();
        let mut block = [0u8; PAGE_SIZE];
        block[..LEN].copy_from_slice(&h.encode());
        assert_eq!(Header::decode(&block), Ok(h));
        assert_eq!(Header::page(100, 77), 99);
        assert_eq!(Header::page(100, 78), 98);
    }

    #[test]
    fn every_damaged_or_out_of_range_header_is_refused() {
        let good = sample().encode();
        // Any single flipped bit: the checksum or the magic catches it.
        for bit in 0..LEN * 8 {
            let mut b = good;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Header::decode(&b).is_err(), "bit {bit}");
        }
        assert_eq!(Header::decode(&[0u8; PAGE_SIZE]), Err(HeaderError::Magic));
        assert!(Header::decode(&good[..40]).is_err());
        // Well-formed checksums over bad fields.
        let bad = |f: &dyn Fn(&mut Header)| {
            let mut h = sample();
            f(&mut h);
            Header::decode(&h.encode())
        };
        assert_eq!(bad(&|h| h.legs = 0), Err(HeaderError::Field("leg count")));
        assert_eq!(bad(&|h| h.legs = 9), Err(HeaderError::Field("leg count")));
        assert_eq!(
            bad(&|h| h.index = 3),
            Err(HeaderError::Field("leg position"))
        );
        assert_eq!(
            bad(&|h| h.block_size = 1024),
            Err(HeaderError::Field("block size"))
        );
        assert_eq!(
            bad(&|h| h.data_blocks = 7),
            Err(HeaderError::Field("data blocks"))
        );
        let mut v = good;
        v[8] = 2;
        let crc = crc32c(&[&v[..56]]);
        v[56..60].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Header::decode(&v), Err(HeaderError::Version(2)));
        let mut s = good;
        s[44] = 9;
        let crc = crc32c(&[&s[..56]]);
        s[56..60].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Header::decode(&s), Err(HeaderError::Field("leg state")));
    }
}
