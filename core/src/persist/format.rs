//! The on-disk format: layout, superblock, and the framing shared by log
//! writes and checkpoint images. Every integer is explicit little-endian;
//! every block that matters carries a CRC-32C. Byte-by-byte tables are in
//! docs/design.md.

use alloc::vec::Vec;

use crate::units::PAGE_SIZE;

/// CRC-32C (Castagnoli), the checksum of every superblock, log write and
/// checkpoint image. The `crc` crate is used because it is `no_std`.
pub fn crc32c(parts: &[&[u8]]) -> u32 {
    const C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
    let mut d = C.digest();
    for p in parts {
        d.update(p);
    }
    d.finalize()
}

/// `"POLLFSv1"` little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"POLLFSv1");
/// Format version written by this code.
pub const VERSION: u32 = 1;
/// Feature flags this code understands (none yet).
pub const FEATURES: u32 = 0;

/// Where everything lives, in 4 KiB filesystem blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Device size in blocks.
    pub blocks: u64,
    /// First log block (superblocks are blocks 0 and 1).
    pub log_start: u64,
    /// Log blocks.
    pub log_blocks: u64,
    /// First block of checkpoint slot 0; slot 1 follows it.
    pub ckpt_start: u64,
    /// Blocks per checkpoint slot.
    pub ckpt_blocks: u64,
    /// First data block; data runs to the end of the device.
    pub data_start: u64,
}

impl Layout {
    /// The layout for a device of `blocks` blocks, or `None` if it is too
    /// small to hold a filesystem.
    pub fn for_blocks(blocks: u64) -> Option<Layout> {
        let log_blocks = (blocks / 32).clamp(64, 16_384);
        let ckpt_blocks = (blocks / 64).clamp(16, 65_536);
        let log_start = 2;
        let ckpt_start = log_start + log_blocks;
        let data_start = ckpt_start + 2 * ckpt_blocks;
        (data_start + 16 <= blocks).then_some(Layout {
            blocks,
            log_start,
            log_blocks,
            ckpt_start,
            ckpt_blocks,
            data_start,
        })
    }

    /// The fewest blocks a device needs to hold a filesystem.
    pub fn min_blocks() -> u64 {
        // `for_blocks` is monotonic in `blocks`: search for its threshold.
        let (mut lo, mut hi) = (1u64, 1u64 << 20);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if Layout::for_blocks(mid).is_some() {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// First block of checkpoint `slot` (0 or 1).
    pub fn ckpt_slot(&self, slot: u32) -> u64 {
        self.ckpt_start + u64::from(slot & 1) * self.ckpt_blocks
    }

    fn valid(&self) -> bool {
        Layout::for_blocks(self.blocks).as_ref() == Some(self)
    }
}

/// A little-endian writer over a byte vector.
#[derive(Debug, Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    /// Appends a `u8`.
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    /// Appends a `u16`.
    pub fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a `u32`.
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a `u64`.
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends bytes.
    pub fn bytes(&mut self, v: &[u8]) {
        self.0.extend_from_slice(v);
    }
}

/// A little-endian reader that fails instead of panicking on short input.
#[derive(Debug)]
pub struct Dec<'a> {
    buf: &'a [u8],
    at: usize,
}

/// The input ended early or held an impossible value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Short;

impl<'a> Dec<'a> {
    /// Reads from `buf`.
    pub fn new(buf: &'a [u8]) -> Dec<'a> {
        Dec { buf, at: 0 }
    }
    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }
    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Short> {
        let end = self.at.checked_add(n).ok_or(Short)?;
        let b = self.buf.get(self.at..end).ok_or(Short)?;
        self.at = end;
        Ok(b)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        self.bytes(N)?.try_into().map_err(|_| Short)
    }
    /// Reads a `u8`.
    pub fn u8(&mut self) -> Result<u8, Short> {
        Ok(self.array::<1>()?[0])
    }
    /// Reads a `u16`.
    pub fn u16(&mut self) -> Result<u16, Short> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    /// Reads a `u32`.
    pub fn u32(&mut self) -> Result<u32, Short> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    /// Reads a `u64`.
    pub fn u64(&mut self) -> Result<u64, Short> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

/// The superblock: written alternately to block 0 and block 1 (by
/// generation parity), so a torn superblock write always leaves the other
/// copy intact. Mount takes the valid copy with the higher generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Identifies this filesystem instance; every log write carries it, so
    /// records left by an earlier filesystem on the same device never replay.
    pub uuid: u64,
    /// Bumped on every superblock write.
    pub generation: u64,
    /// Device logical block size when formatted.
    pub lba_size: u32,
    /// The layout.
    pub layout: Layout,
    /// Which checkpoint slot holds the current image.
    pub ckpt_slot: u32,
    /// Log sequence number the checkpoint includes; replay starts after it.
    pub ckpt_lsn: u64,
    /// Log block (relative to `log_start`) where replay starts.
    pub log_head: u64,
}

/// Bytes of an encoded superblock (the rest of the block is zero).
pub const SUPERBLOCK_LEN: usize = 108;

impl Superblock {
    /// Encodes into one block.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u64(MAGIC);
        e.u32(VERSION);
        e.u32(FEATURES);
        e.u64(self.uuid);
        e.u64(self.generation);
        e.u32(self.lba_size);
        e.u64(self.layout.blocks);
        e.u64(self.layout.log_start);
        e.u64(self.layout.log_blocks);
        e.u64(self.layout.ckpt_start);
        e.u64(self.layout.ckpt_blocks);
        e.u64(self.layout.data_start);
        e.u32(self.ckpt_slot);
        e.u64(self.ckpt_lsn);
        e.u64(self.log_head);
        let crc = crc32c(&[&e.0]);
        e.u32(crc);
        debug_assert_eq!(e.0.len(), SUPERBLOCK_LEN);
        e.0.resize(PAGE_SIZE, 0);
        e.0
    }

    /// Decodes and checks one block.
    pub fn decode(block: &[u8]) -> Result<Superblock, &'static str> {
        let body = block
            .get(..SUPERBLOCK_LEN - 4)
            .ok_or("superblock truncated")?;
        let mut d = Dec::new(block);
        let short = |_| "superblock truncated";
        if d.u64().map_err(short)? != MAGIC {
            return Err("bad magic (not a pollfs filesystem)");
        }
        let version = d.u32().map_err(short)?;
        let features = d.u32().map_err(short)?;
        let mut sb = Superblock {
            uuid: d.u64().map_err(short)?,
            generation: d.u64().map_err(short)?,
            lba_size: d.u32().map_err(short)?,
            layout: Layout {
                blocks: d.u64().map_err(short)?,
                log_start: d.u64().map_err(short)?,
                log_blocks: d.u64().map_err(short)?,
                ckpt_start: d.u64().map_err(short)?,
                ckpt_blocks: d.u64().map_err(short)?,
                data_start: d.u64().map_err(short)?,
            },
            ckpt_slot: 0,
            ckpt_lsn: 0,
            log_head: 0,
        };
        sb.ckpt_slot = d.u32().map_err(short)?;
        sb.ckpt_lsn = d.u64().map_err(short)?;
        sb.log_head = d.u64().map_err(short)?;
        let crc = d.u32().map_err(short)?;
        if crc != crc32c(&[body]) {
            return Err("superblock checksum mismatch");
        }
        if version != VERSION {
            return Err("unsupported format version");
        }
        if features & !FEATURES != 0 {
            return Err("unknown feature flags");
        }
        if !sb.layout.valid() || sb.ckpt_slot > 1 || sb.log_head >= sb.layout.log_blocks {
            return Err("superblock layout is inconsistent");
        }
        if sb.lba_size != 512 && sb.lba_size != 4096 {
            return Err("superblock block size is invalid");
        }
        Ok(sb)
    }
}

/// Framing of a log write or a checkpoint image: a 40-byte header, then the
/// payload, over one or more whole blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// `FRAME_LOG` or `FRAME_CKPT`.
    pub kind: u32,
    /// The filesystem's uuid.
    pub uuid: u64,
    /// Log sequence number (for a checkpoint: the last one it includes).
    pub lsn: u64,
    /// Blocks the frame spans.
    pub blocks: u32,
    /// Payload bytes.
    pub payload_len: u32,
}

/// A log write.
pub const FRAME_LOG: u32 = 0x4c4f_4731;
/// A checkpoint image.
pub const FRAME_CKPT: u32 = 0x434b_5031;
/// Bytes of a frame header.
pub const FRAME_HEADER: usize = 40;

impl Frame {
    /// Header + payload, padded to whole blocks, checksummed.
    pub fn encode(kind: u32, uuid: u64, lsn: u64, payload: &[u8]) -> Vec<u8> {
        let total = FRAME_HEADER + payload.len();
        let blocks = total.div_ceil(PAGE_SIZE).max(1);
        let mut e = Enc::default();
        e.u64(MAGIC);
        e.u32(kind);
        e.u64(uuid);
        e.u64(lsn);
        e.u32(blocks as u32);
        e.u32(payload.len() as u32);
        let crc = crc32c(&[&e.0, payload]);
        e.u32(crc);
        debug_assert_eq!(e.0.len(), FRAME_HEADER);
        e.bytes(payload);
        e.0.resize(blocks * PAGE_SIZE, 0);
        e.0
    }

    /// Reads a header from the first block of a frame.
    pub fn header(block: &[u8]) -> Option<(Frame, u32)> {
        let mut d = Dec::new(block);
        if d.u64().ok()? != MAGIC {
            return None;
        }
        let f = Frame {
            kind: d.u32().ok()?,
            uuid: d.u64().ok()?,
            lsn: d.u64().ok()?,
            blocks: d.u32().ok()?,
            payload_len: d.u32().ok()?,
        };
        let crc = d.u32().ok()?;
        let fits = (f.payload_len as usize + FRAME_HEADER)
            .div_ceil(PAGE_SIZE)
            .max(1)
            == f.blocks as usize;
        fits.then_some((f, crc))
    }

    /// Checks the whole frame's checksum; returns the payload.
    pub fn payload<'a>(bytes: &'a [u8], f: &Frame, crc: u32) -> Option<&'a [u8]> {
        let head = bytes.get(..FRAME_HEADER - 4)?;
        let payload = bytes.get(FRAME_HEADER..FRAME_HEADER + f.payload_len as usize)?;
        (crc32c(&[head, payload]) == crc).then_some(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_round_trips_and_rejects_damage() {
        let layout = Layout::for_blocks(10_000).unwrap();
        let sb = Superblock {
            uuid: 7,
            generation: 3,
            lba_size: 512,
            layout,
            ckpt_slot: 1,
            ckpt_lsn: 9,
            log_head: 5,
        };
        let mut block = sb.encode();
        assert_eq!(Superblock::decode(&block), Ok(sb));
        block[20] ^= 1;
        assert_eq!(
            Superblock::decode(&block),
            Err("superblock checksum mismatch")
        );
        assert!(Superblock::decode(&[0u8; 10]).is_err());
        assert!(Superblock::decode(&[0u8; PAGE_SIZE]).is_err());
    }

    #[test]
    fn frames_round_trip_and_detect_any_flip() {
        let payload: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let bytes = Frame::encode(FRAME_LOG, 1, 42, &payload);
        assert_eq!(bytes.len(), 2 * PAGE_SIZE);
        let (f, crc) = Frame::header(&bytes).unwrap();
        assert_eq!((f.lsn, f.blocks, f.payload_len), (42, 2, 5000));
        assert_eq!(Frame::payload(&bytes, &f, crc), Some(&payload[..]));
        let mut bad = bytes.clone();
        bad[FRAME_HEADER + 4000] ^= 0x80;
        assert_eq!(Frame::payload(&bad, &f, crc), None);
    }

    #[test]
    fn tiny_devices_have_no_layout() {
        assert!(Layout::for_blocks(100).is_none());
        let min = Layout::min_blocks();
        assert!(Layout::for_blocks(min).is_some() && Layout::for_blocks(min - 1).is_none());
        let l = Layout::for_blocks(1 << 20).unwrap();
        assert!(l.data_start < l.blocks && l.log_blocks == 16_384);
    }
}
