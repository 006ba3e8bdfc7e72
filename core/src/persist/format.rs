//! The on-disk format: layout, superblock, and the framing shared by log
//! writes and checkpoint frames. Every integer is explicit little-endian;
//! every block that matters carries a CRC-32C. Byte-by-byte tables are in
//! docs/design/format.md, section 7.

use alloc::vec::Vec;

use super::index::{Root, MAX_LEVELS};
use crate::error::{Damage, SuperblockField};
use crate::units::{PAGE_SIZE, PAGE_SIZE_U64};

/// CRC-32C (Castagnoli), the checksum of every superblock, log write and
/// checkpoint frame. The `crc` crate is used because it is `no_std`; its
/// slice-by-16 tables (16 KiB, built at compile time), because a small
/// sync checksums its data page in its log write.
pub fn crc32c(parts: &[&[u8]]) -> u32 {
    const C: crc::Crc<u32, crc::Table<16>> =
        crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);
    let mut d = C.digest();
    for p in parts {
        d.update(p);
    }
    d.finalize()
}

/// `"POLLFSv1"` little-endian: the magic of every pollfs superblock and
/// frame, whatever the format version.
pub const MAGIC: u64 = u64::from_le_bytes(*b"POLLFSv1");
/// Format version written by this code. Version 1 kept checkpoints in two
/// fixed slots; version 2 keeps them in the data area, as long as needed;
/// version 3 has directories, links and attributes (inode, link, unlink,
/// rename and free records); version 4 logs small syncs' data (data and
/// home records); version 5 has FIFOs, sockets and device nodes (inode
/// kinds 4 to 7, a device node's record carrying its device number) and
/// extended attributes (xattr records); version 6 checkpoints into the
/// metadata index ([`index`](super::index)), a copy-on-write tree of
/// pages whose root the superblock names, so a checkpoint writes the
/// pages that changed, not the whole image.
/// Only this version is read: an image of another gets
/// [`Damage::Version`](crate::error::Damage::Version).
pub const VERSION: u32 = 6;
/// Feature flags this code understands (none yet).
pub const FEATURES: u32 = 0;

/// Fewest data blocks a filesystem has.
pub const MIN_DATA_BLOCKS: u64 = 64;
/// Largest checkpoint frame, in blocks: a checkpoint is a chain of frames,
/// each a run of contiguous data blocks of at most this many.
pub const CKPT_FRAME_MAX_BLOCKS: u64 = 256;
/// Largest log write, in blocks (also at most a quarter of the log). A
/// commit whose records need more is written as a checkpoint instead.
pub const LOG_FRAME_MAX_BLOCKS: u64 = 256;

/// Where everything lives, in 4 KiB filesystem blocks: two superblocks,
/// the circular log, then the data area, which also holds the checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Device size in blocks.
    pub blocks: u64,
    /// First log block (superblocks are blocks 0 and 1).
    pub log_start: u64,
    /// Log blocks.
    pub log_blocks: u64,
    /// First data block; data runs to the end of the device.
    pub data_start: u64,
}

impl Layout {
    /// The layout for a device of `blocks` blocks, or `None` if it is too
    /// small to hold a filesystem.
    pub fn for_blocks(blocks: u64) -> Option<Layout> {
        let log_blocks = (blocks / 32).clamp(64, 16_384);
        let log_start = 2;
        let data_start = log_start + log_blocks;
        (data_start.checked_add(MIN_DATA_BLOCKS)? <= blocks).then_some(Layout {
            blocks,
            log_start,
            log_blocks,
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

    /// Blocks in the data area.
    pub fn data_blocks(&self) -> u64 {
        self.blocks - self.data_start
    }

    /// True if `[block, block + len)` lies inside the data area.
    pub fn in_data(&self, block: u64, len: u64) -> bool {
        len > 0
            && block >= self.data_start
            && block.checked_add(len).is_some_and(|end| end <= self.blocks)
    }

    /// Largest log write in blocks.
    pub fn log_frame_max(&self) -> u64 {
        (self.log_blocks / 4).min(LOG_FRAME_MAX_BLOCKS)
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

/// The input ended early.
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
    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.at
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

/// Where a checkpoint frame lives: a run of data blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Location {
    /// First block.
    pub block: u64,
    /// Blocks (1 to [`CKPT_FRAME_MAX_BLOCKS`]; 0 means "none").
    pub blocks: u32,
}

/// The superblock: written alternately to block 0 and block 1 (by
/// generation parity), so a torn superblock write always leaves the other
/// copy intact. Mount takes the valid copy with the higher generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Identifies this filesystem instance; every frame carries it, so
    /// frames left by an earlier filesystem on the same device never count.
    pub uuid: u64,
    /// Bumped on every superblock write.
    pub generation: u64,
    /// Device logical block size when formatted.
    pub lba_size: u32,
    /// The layout.
    pub layout: Layout,
    /// The metadata index's root page (see [`index`](super::index)).
    pub root: Root,
    /// Records the checkpoint made durable beside the index (a commit too
    /// large for one log write folds its records into a checkpoint): the
    /// first frame of their chain, `blocks` 0 if there are none. They
    /// replay after the index, before the log.
    pub carry: Location,
    /// Blocks of the whole carried chain (0 with none).
    pub carry_total: u64,
    /// Log sequence number the checkpoint includes; replay starts after it.
    pub ckpt_lsn: u64,
    /// Log block (relative to `log_start`) where replay starts.
    pub log_head: u64,
    /// The key of the SipHash that places directory entries and extended
    /// attribute names in the index ([`bucket`](super::index::items::bucket)),
    /// chosen when the filesystem is made.
    pub hash_key: (u64, u64),
}

/// Bytes of an encoded superblock (the rest of the block is zero).
pub const SUPERBLOCK_LEN: usize = 144;

/// Largest generation or sequence number accepted from disk: leaves room to
/// count on for longer than any device lives, with no overflow checks.
pub const MAX_SEQUENCE: u64 = 1 << 62;

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
        e.u64(self.layout.data_start);
        e.u64(self.root.block);
        e.u64(self.root.generation);
        e.u32(u32::from(self.root.level));
        e.u64(self.carry.block);
        e.u32(self.carry.blocks);
        e.u64(self.carry_total);
        e.u64(self.ckpt_lsn);
        e.u64(self.log_head);
        e.u64(self.hash_key.0);
        e.u64(self.hash_key.1);
        let crc = crc32c(&[&e.0]);
        e.u32(crc);
        debug_assert_eq!(e.0.len(), SUPERBLOCK_LEN);
        e.0.resize(PAGE_SIZE, 0);
        e.0
    }

    /// Decodes and checks one block: checksum, version, and that every
    /// field is in range and agrees with the others (so nothing computed
    /// from it later can overflow).
    pub fn decode(block: &[u8]) -> Result<Superblock, Damage> {
        let mut d = Dec::new(block);
        let short = |_| Damage::SuperblockFields(SuperblockField::Truncated);
        if d.u64().map_err(short)? != MAGIC {
            return Err(Damage::NotPollfs);
        }
        let version = d.u32().map_err(short)?;
        if version != VERSION {
            // Checked before the checksum: an older version's superblock
            // is laid out differently, and saying so is the useful answer.
            return Err(Damage::Version {
                found: version,
                supported: VERSION,
            });
        }
        let features = d.u32().map_err(short)?;
        let sb = Superblock {
            uuid: d.u64().map_err(short)?,
            generation: d.u64().map_err(short)?,
            lba_size: d.u32().map_err(short)?,
            layout: Layout {
                blocks: d.u64().map_err(short)?,
                log_start: d.u64().map_err(short)?,
                log_blocks: d.u64().map_err(short)?,
                data_start: d.u64().map_err(short)?,
            },
            root: Root {
                block: d.u64().map_err(short)?,
                generation: d.u64().map_err(short)?,
                // Out of range becomes a level the check refuses.
                level: u8::try_from(d.u32().map_err(short)?).unwrap_or(u8::MAX),
            },
            carry: Location {
                block: d.u64().map_err(short)?,
                blocks: d.u32().map_err(short)?,
            },
            carry_total: d.u64().map_err(short)?,
            ckpt_lsn: d.u64().map_err(short)?,
            log_head: d.u64().map_err(short)?,
            hash_key: (d.u64().map_err(short)?, d.u64().map_err(short)?),
        };
        let crc = d.u32().map_err(short)?;
        let body = block.get(..SUPERBLOCK_LEN - 4).ok_or(short(Short))?;
        if crc != crc32c(&[body]) {
            return Err(Damage::SuperblockChecksum);
        }
        if features & !FEATURES != 0 {
            return Err(Damage::Features(features));
        }
        sb.check()?;
        Ok(sb)
    }

    fn check(&self) -> Result<(), Damage> {
        let bad = |what| Err(Damage::SuperblockFields(what));
        if !self.layout.valid() {
            return bad(SuperblockField::Layout {
                blocks: self.layout.blocks,
            });
        }
        if self.lba_size != 512 && self.lba_size != 4096 {
            return bad(SuperblockField::BlockSize(self.lba_size));
        }
        if self.log_head >= self.layout.log_blocks {
            return bad(SuperblockField::LogHead {
                head: self.log_head,
                log_blocks: self.layout.log_blocks,
            });
        }
        if self.generation == 0 || self.generation > MAX_SEQUENCE || self.ckpt_lsn > MAX_SEQUENCE {
            return bad(SuperblockField::Sequence {
                generation: self.generation,
                ckpt_lsn: self.ckpt_lsn,
            });
        }
        let root = self.root;
        if !self.layout.in_data(root.block, 1)
            || root.generation == 0
            || root.generation > self.generation
            || usize::from(root.level) >= MAX_LEVELS
        {
            return bad(SuperblockField::IndexRoot {
                block: root.block,
                generation: root.generation,
                level: root.level,
            });
        }
        let first = u64::from(self.carry.blocks);
        if first == 0 {
            if self.carry.block != 0 || self.carry_total != 0 {
                return bad(SuperblockField::CheckpointSize(self.carry_total));
            }
            return Ok(());
        }
        if first > CKPT_FRAME_MAX_BLOCKS || !self.layout.in_data(self.carry.block, first) {
            return bad(SuperblockField::CheckpointLocation {
                block: self.carry.block,
                blocks: self.carry.blocks,
            });
        }
        if self.carry_total < first || self.carry_total > self.layout.data_blocks() {
            return bad(SuperblockField::CheckpointSize(self.carry_total));
        }
        Ok(())
    }
}

/// Framing of a log write or a checkpoint frame: a 56-byte header, then
/// the payload, over one or more whole blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// `FRAME_LOG` or `FRAME_CKPT`.
    pub kind: u32,
    /// The filesystem's uuid.
    pub uuid: u64,
    /// Log sequence number (for a checkpoint frame: the last one the
    /// checkpoint includes).
    pub lsn: u64,
    /// Blocks the frame spans.
    pub blocks: u32,
    /// Payload bytes.
    pub payload_len: u32,
    /// The next checkpoint frame (`blocks` 0: this is the last); unused in
    /// log writes.
    pub next: Location,
    /// Position in the checkpoint chain (0 for the first); unused in log
    /// writes.
    pub index: u32,
}

/// A log write.
pub const FRAME_LOG: u32 = 0x4c4f_4732;
/// A checkpoint frame.
pub const FRAME_CKPT: u32 = 0x434b_5032;
/// Bytes of a frame header.
pub const FRAME_HEADER: usize = 56;

impl Frame {
    /// Blocks a frame with `payload_len` payload bytes spans.
    pub fn blocks_for(payload_len: usize) -> u64 {
        ((FRAME_HEADER + payload_len) as u64)
            .div_ceil(PAGE_SIZE_U64)
            .max(1)
    }

    /// Payload bytes a frame of `blocks` blocks holds.
    pub fn capacity(blocks: u64) -> usize {
        (blocks as usize * PAGE_SIZE).saturating_sub(FRAME_HEADER)
    }

    /// Header + payload, padded to whole blocks, checksummed. The header's
    /// `blocks` and `payload_len` are computed from `payload`.
    pub fn encode(&self, payload: &[u8]) -> Vec<u8> {
        let blocks = Frame::blocks_for(payload.len()) as usize;
        let mut e = Enc::default();
        e.u64(MAGIC);
        e.u32(self.kind);
        e.u64(self.uuid);
        e.u64(self.lsn);
        e.u32(blocks as u32);
        e.u32(payload.len() as u32);
        e.u64(self.next.block);
        e.u32(self.next.blocks);
        e.u32(self.index);
        let crc = crc32c(&[&e.0, payload]);
        e.u32(crc);
        debug_assert_eq!(e.0.len(), FRAME_HEADER);
        e.bytes(payload);
        e.0.resize(blocks * PAGE_SIZE, 0);
        e.0
    }

    /// A log write frame header.
    pub fn log(uuid: u64, lsn: u64) -> Frame {
        Frame {
            kind: FRAME_LOG,
            uuid,
            lsn,
            blocks: 0,
            payload_len: 0,
            next: Location::default(),
            index: 0,
        }
    }

    /// Reads a header from the first block of a frame; `None` if it is not
    /// a well-formed header (its checksum is checked with the payload).
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
            next: Location {
                block: d.u64().ok()?,
                blocks: d.u32().ok()?,
            },
            index: d.u32().ok()?,
        };
        let crc = d.u32().ok()?;
        let fits = Frame::blocks_for(f.payload_len as usize) == u64::from(f.blocks);
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

    fn superblock() -> Superblock {
        let layout = Layout::for_blocks(10_000).unwrap();
        Superblock {
            uuid: 7,
            generation: 3,
            lba_size: 512,
            layout,
            root: Root {
                block: layout.data_start + 3,
                generation: 2,
                level: 1,
            },
            carry: Location {
                block: layout.data_start,
                blocks: 2,
            },
            carry_total: 5,
            ckpt_lsn: 9,
            log_head: 5,
            hash_key: (11, 12),
        }
    }

    #[test]
    fn superblock_round_trips_and_rejects_damage() {
        let sb = superblock();
        let mut block = sb.encode();
        assert_eq!(Superblock::decode(&block), Ok(sb));
        block[20] ^= 1;
        assert_eq!(Superblock::decode(&block), Err(Damage::SuperblockChecksum));
        assert!(Superblock::decode(&[0u8; 10]).is_err());
        assert_eq!(
            Superblock::decode(&[0u8; PAGE_SIZE]),
            Err(Damage::NotPollfs)
        );
    }

    #[test]
    fn superblock_fields_out_of_range_are_refused_with_a_valid_checksum() {
        type Change = fn(&mut Superblock);
        let cases: [(&str, Change); 13] = [
            ("generation", |s| s.generation = u64::MAX),
            ("lsn", |s| s.ckpt_lsn = u64::MAX),
            ("head", |s| s.log_head = s.layout.log_blocks),
            ("carry in log", |s| s.carry.block = 2),
            ("carry past end", |s| s.carry.block = s.layout.blocks - 1),
            ("carry total", |s| s.carry_total = u64::MAX),
            ("no carry, a total", |s| {
                s.carry = Location::default();
                s.carry_total = 1;
            }),
            ("lba", |s| s.lba_size = 1024),
            ("root in log", |s| s.root.block = 2),
            ("root past end", |s| s.root.block = s.layout.blocks),
            ("root newer", |s| s.root.generation = s.generation + 1),
            ("root generation 0", |s| s.root.generation = 0),
            ("root level", |s| s.root.level = MAX_LEVELS as u8),
        ];
        for (what, change) in cases {
            let mut sb = superblock();
            change(&mut sb);
            assert!(
                matches!(
                    Superblock::decode(&sb.encode()),
                    Err(Damage::SuperblockFields(_))
                ),
                "{what}"
            );
        }
    }

    #[test]
    fn an_older_version_is_named() {
        let mut block = superblock().encode();
        block[8..12].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(
            Superblock::decode(&block),
            Err(Damage::Version {
                found: 1,
                supported: VERSION
            })
        );
    }

    #[test]
    fn frames_round_trip_and_detect_any_flip() {
        let payload: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let mut frame = Frame::log(1, 42);
        frame.index = 3;
        let bytes = frame.encode(&payload);
        assert_eq!(bytes.len(), 2 * PAGE_SIZE);
        let (f, crc) = Frame::header(&bytes).unwrap();
        assert_eq!((f.lsn, f.blocks, f.payload_len, f.index), (42, 2, 5000, 3));
        assert_eq!(Frame::payload(&bytes, &f, crc), Some(&payload[..]));
        let mut bad = bytes.clone();
        bad[FRAME_HEADER + 4000] ^= 0x80;
        assert_eq!(Frame::payload(&bad, &f, crc), None);
        assert_eq!(
            Frame::capacity(Frame::blocks_for(5000)),
            2 * PAGE_SIZE - FRAME_HEADER
        );
    }

    #[test]
    fn tiny_devices_have_no_layout() {
        assert!(Layout::for_blocks(100).is_none());
        let min = Layout::min_blocks();
        assert!(Layout::for_blocks(min).is_some() && Layout::for_blocks(min - 1).is_none());
        let l = Layout::for_blocks(1 << 20).unwrap();
        assert!(l.data_start < l.blocks && l.log_blocks == 16_384);
        assert_eq!(l.log_frame_max(), LOG_FRAME_MAX_BLOCKS);
        // The largest device still has a layout, computed without overflow.
        assert!(Layout::for_blocks(u64::MAX).is_some_and(|l| l.in_data(u64::MAX - 1, 1)));
    }
}
