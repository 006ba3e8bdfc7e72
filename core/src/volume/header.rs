//! The mirror header: one 4 KiB block at the end of every leg, in two
//! copies, saying which mirror the leg belongs to, which legs were in
//! sync when it was written, and which regions of the mirror may differ
//! between legs (the write-intent bitmap).
//!
//! ```text
//! offset size field
//!      0    8 magic "PFSMIRR\0"
//!      8    4 version (2; 1 is read as "no bitmap")
//!     12    4 logical block size of the legs
//!     16    8 mirror id (chosen at creation)
//!     24    8 generation: +1 for every header written with a change: of
//!             the table below, of the dirty flag, of the legs'
//!             membership, or of the bitmap
//!     32    8 data blocks: the mirror's capacity, in logical blocks
//!     40    1 leg count (1..=8)
//!     41    1 this leg's position
//!     42    1 flags: bit 0 dirty (opened for writing and not closed since)
//!     43    1 region shift: a bitmap region is 2^shift pages (v1: 0)
//!     44    8 leg table: one state per position (0 in sync, 1 stale,
//!             2 failed); positions past the leg count are 0
//!     52    4 zero
//!     56    4 CRC-32C of bytes 0..56 (v1), of 0..56 and 60..4096 (v2)
//!     60    4 zero
//!     64    8 bitmap since: the bitmap has recorded every write of every
//!             generation from this one on (v2)
//!     72 4024 bitmap: bit r (byte r / 8, bit r % 8) set if region r may
//!             differ between legs; bits past the region count are 0 (v2)
//! ```
//!
//! The two copies live in the leg's last two pages: a header of generation
//! `g` goes to copy `g % 2`, so a write torn by a crash leaves the other
//! copy, one generation older, intact. The leg's data is every page before
//! them, at the same addresses as on the mirror: one leg alone holds a
//! plain pollfs image. A version 1 header (written before the bitmap) is
//! read with no bitmap: a leg that returns to such a mirror is copied
//! whole, and the next header written is version 2.
//!
//! All integers are little-endian.

use crate::persist::format::crc32c;
use crate::units::PAGE_SIZE;

use super::MAX_LEGS;

/// The header's magic bytes.
pub const MAGIC: [u8; 8] = *b"PFSMIRR\0";
/// The format version written.
pub const VERSION: u32 = 2;
/// The version before the bitmap, still read.
pub const VERSION_NO_BITMAP: u32 = 1;
/// Bytes the fixed fields take (the bitmap follows them).
pub const LEN: usize = 60;
/// Pages at the end of every leg kept for the two header copies.
pub const PAGES: u64 = 2;
/// Where the bitmap starts in the header block.
pub const BITMAP_AT: usize = 72;
/// Bytes of bitmap in one header block.
pub const BITMAP_BYTES: usize = PAGE_SIZE - BITMAP_AT;
/// The most regions a bitmap holds.
pub const MAX_REGIONS: u64 = BITMAP_BYTES as u64 * 8;
/// The smallest region: 2^8 pages, 1 MiB (`region_shift`).
pub const MIN_REGION_SHIFT: u8 = 8;

const _: () = assert!(LEN <= BITMAP_AT && BITMAP_AT < PAGE_SIZE);
const _: () = assert!(44 + MAX_LEGS + 4 + 4 == LEN);

/// The region size for a mirror of `data_pages` pages: the smallest power
/// of two pages, at least [`MIN_REGION_SHIFT`], whose regions fit the
/// bitmap (1 MiB up to a 31 GiB mirror, 256 MiB for 4 TiB).
pub fn region_shift(data_pages: u64) -> u8 {
    let mut shift = MIN_REGION_SHIFT;
    while data_pages.div_ceil(1 << shift) > MAX_REGIONS {
        shift += 1;
    }
    shift
}

/// A write-intent bitmap as a header carries it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Bitmap {
    /// A region is `2^shift` pages.
    pub shift: u8,
    /// The first generation whose writes the bitmap records: a leg whose
    /// own header is of this generation or newer, and in sync there,
    /// lacks nothing outside the regions set.
    pub since: u64,
    /// Region `r` is bit `r % 8` of byte `r / 8`.
    pub bits: [u8; BITMAP_BYTES],
}

impl Bitmap {
    /// An empty bitmap of regions of `2^shift` pages, recording from
    /// generation `since`.
    pub fn empty(shift: u8, since: u64) -> Bitmap {
        Bitmap {
            shift,
            since,
            bits: [0; BITMAP_BYTES],
        }
    }
    /// Regions set.
    pub fn count(&self) -> u32 {
        self.bits.iter().map(|b| b.count_ones()).sum()
    }
}

impl core::fmt::Debug for Bitmap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Bitmap")
            .field("shift", &self.shift)
            .field("since", &self.since)
            .field("set", &self.count())
            .finish()
    }
}

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
    /// The write-intent bitmap (`None` in a version 1 header).
    pub bitmap: Option<Bitmap>,
}

/// Why a block is not a usable header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderError {
    /// Not a mirror header at all.
    Magic,
    /// The checksum does not match.
    Checksum,
    /// Written by a newer version of the format.
    Version(u32),
    /// A field is out of range.
    Field(&'static str),
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

impl Header {
    /// The header's block (version 2, with an empty bitmap of the
    /// mirror's region size if it has none).
    pub fn encode(&self) -> [u8; PAGE_SIZE] {
        let mut b = [0u8; PAGE_SIZE];
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
        let pages = self.data_blocks / (PAGE_SIZE as u64 / u64::from(self.block_size.max(1)));
        let bitmap = self
            .bitmap
            .unwrap_or_else(|| Bitmap::empty(region_shift(pages), self.generation));
        b[43] = bitmap.shift;
        b[64..72].copy_from_slice(&bitmap.since.to_le_bytes());
        b[BITMAP_AT..].copy_from_slice(&bitmap.bits);
        let crc = crc32c(&[&b[..56], &b[60..]]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a header block, checking everything: after this, no field
    /// is out of range. A version 1 header needs only its first [`LEN`]
    /// bytes and has no bitmap; a version 2 header needs the whole block.
    pub fn decode(block: &[u8]) -> Result<Header, HeaderError> {
        let b = block.get(..LEN).ok_or(HeaderError::Field("short block"))?;
        if b[0..8] != MAGIC {
            return Err(HeaderError::Magic);
        }
        let version = u32_at(b, 8);
        let b = match version {
            VERSION_NO_BITMAP => b,
            VERSION => block
                .get(..PAGE_SIZE)
                .ok_or(HeaderError::Field("short block"))?,
            _ => return Err(HeaderError::Version(version)),
        };
        let crc = match version {
            VERSION_NO_BITMAP => crc32c(&[&b[..56]]),
            _ => crc32c(&[&b[..56], &b[60..]]),
        };
        if u32_at(b, 56) != crc {
            return Err(HeaderError::Checksum);
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
        if b[42] > 1 || b[52..56] != [0; 4] {
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
        let bitmap = match version {
            VERSION_NO_BITMAP if b[43] != 0 => return Err(HeaderError::Field("flags")),
            VERSION_NO_BITMAP => None,
            _ => Some(decode_bitmap(b, data_blocks / per_page)?),
        };
        Ok(Header {
            block_size,
            uuid: u64_at(b, 16),
            generation: u64_at(b, 24),
            data_blocks,
            legs,
            index,
            dirty: b[42] == 1,
            table,
            bitmap,
        })
    }

    /// Regions of this header's bitmap (0 without one).
    pub fn regions(&self) -> u64 {
        let per_page = (PAGE_SIZE as u32 / self.block_size.max(1)) as u64;
        self.bitmap.map_or(0, |m| {
            (self.data_blocks / per_page).div_ceil(1u64 << m.shift)
        })
    }

    /// The header copy's page on a leg of `leg_pages` pages (copy
    /// `generation % 2` of the last two).
    pub fn page(leg_pages: u64, generation: u64) -> u64 {
        leg_pages - PAGES + generation % 2
    }
}

/// The bitmap of a version 2 block `b` of a mirror of `pages` pages.
fn decode_bitmap(b: &[u8], pages: u64) -> Result<Bitmap, HeaderError> {
    let shift = b[43];
    if !(MIN_REGION_SHIFT..=40).contains(&shift) {
        return Err(HeaderError::Field("region shift"));
    }
    let regions = pages.div_ceil(1 << shift);
    if regions > MAX_REGIONS || b[60..64] != [0; 4] {
        return Err(HeaderError::Field("region count"));
    }
    let mut bits = [0u8; BITMAP_BYTES];
    bits.copy_from_slice(&b[BITMAP_AT..PAGE_SIZE]);
    let used = regions as usize;
    let stray = bits.iter().enumerate().any(|(i, &byte)| {
        let first = i * 8;
        let keep = used.saturating_sub(first).min(8);
        let mask = if keep == 8 { 0 } else { 0xFFu8 << keep };
        byte & mask != 0
    });
    if stray {
        return Err(HeaderError::Field("bitmap bits past the region count"));
    }
    Ok(Bitmap {
        shift,
        since: u64_at(b, 64),
        bits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        let mut table = [Recorded::InSync; MAX_LEGS];
        table[1] = Recorded::Failed;
        table[2] = Recorded::Stale;
        let mut bitmap = Bitmap::empty(MIN_REGION_SHIFT, 70);
        bitmap.bits[0] = 0b101;
        Header {
            block_size: 512,
            uuid: 0x1234_5678_9abc_def0,
            generation: 77,
            // 1000 pages: 4 regions of 256 pages.
            data_blocks: 8 * 1000,
            legs: 3,
            index: 2,
            dirty: true,
            table,
            bitmap: Some(bitmap),
        }
    }

    /// `b` with a checksum made right for `version`.
    fn resealed(mut b: [u8; PAGE_SIZE], version: u32) -> [u8; PAGE_SIZE] {
        b[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = match version {
            VERSION_NO_BITMAP => crc32c(&[&b[..56]]),
            _ => crc32c(&[&b[..56], &b[60..]]),
        };
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn headers_round_trip_and_sit_in_alternating_copies() {
        let h = sample();
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        assert_eq!(h.regions(), 4);
        assert_eq!(h.bitmap.map(|m| m.count()), Some(2));
        assert_eq!(Header::page(100, 77), 99);
        assert_eq!(Header::page(100, 78), 98);
    }

    #[test]
    fn a_version_1_header_is_read_without_a_bitmap() {
        let mut b = sample().encode();
        b[43] = 0;
        b[60..].fill(0);
        let old = resealed(b, VERSION_NO_BITMAP);
        let h = Header::decode(&old[..LEN]).unwrap();
        assert_eq!(h.bitmap, None);
        assert_eq!(h.generation, 77);
        // Written again, it is version 2 with an empty bitmap.
        let again = Header::decode(&h.encode()).unwrap();
        assert_eq!(again.bitmap.map(|m| m.count()), Some(0));
        assert_eq!(u32_at(&h.encode(), 8), VERSION);
        // A newer version is refused by number.
        let newer = resealed(sample().encode(), 3);
        assert_eq!(Header::decode(&newer), Err(HeaderError::Version(3)));
    }

    #[test]
    fn the_region_size_grows_with_the_mirror_so_the_bitmap_fits() {
        let mib = 256u64;
        assert_eq!(region_shift(64 * mib), MIN_REGION_SHIFT);
        assert_eq!(
            region_shift(MAX_REGIONS << MIN_REGION_SHIFT),
            MIN_REGION_SHIFT
        );
        assert_eq!(region_shift((MAX_REGIONS << MIN_REGION_SHIFT) + 1), 9);
        // 4 TiB: 256 MiB regions.
        assert_eq!(region_shift(4 << 20 << 8), 16);
        for pages in [1, 1000, 1 << 30, u64::MAX >> 13] {
            assert!(pages.div_ceil(1 << region_shift(pages)) <= MAX_REGIONS);
        }
    }

    #[test]
    fn every_damaged_or_out_of_range_header_is_refused() {
        let good = sample().encode();
        // Any single flipped bit of the fields, the bitmap's start and its
        // end: the checksum or the magic catches it.
        let bits = (0..(BITMAP_AT + 16) * 8).chain((PAGE_SIZE - 16) * 8..PAGE_SIZE * 8);
        for bit in bits {
            let mut b = good;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Header::decode(&b).is_err(), "bit {bit}");
        }
        assert_eq!(Header::decode(&[0u8; PAGE_SIZE]), Err(HeaderError::Magic));
        assert!(Header::decode(&good[..40]).is_err());
        assert!(
            Header::decode(&good[..LEN]).is_err(),
            "version 2 is a block"
        );
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
        let mut s = good;
        s[44] = 9;
        assert_eq!(
            Header::decode(&resealed(s, VERSION)),
            Err(HeaderError::Field("leg state"))
        );
        let stray = |f: &dyn Fn(&mut Bitmap)| {
            bad(&|h| {
                if let Some(m) = h.bitmap.as_mut() {
                    f(m)
                }
            })
        };
        assert_eq!(
            stray(&|m| m.bits[0] |= 1 << 4),
            Err(HeaderError::Field("bitmap bits past the region count"))
        );
        assert_eq!(
            stray(&|m| m.bits[BITMAP_BYTES - 1] = 1),
            Err(HeaderError::Field("bitmap bits past the region count"))
        );
        assert_eq!(
            stray(&|m| m.shift = 7),
            Err(HeaderError::Field("region shift"))
        );
        assert_eq!(
            bad(&|h| h.data_blocks = 8 << 30),
            Err(HeaderError::Field("region count"))
        );
    }
}
