//! One index page on the device: a 40-byte header and a payload of
//! entries, 4 KiB in all, checked whole before any field is used.
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic `PIX1` (0x31584950 little-endian) |
//! | 4 | 1 | level (0: leaf; a branch's children are one level down) |
//! | 5 | 1 | zero |
//! | 6 | 2 | entries (a leaf's key-value pairs; a branch's children) |
//! | 8 | 2 | payload bytes used |
//! | 10 | 2 | zero |
//! | 12 | 4 | CRC-32C of the whole page with this field zero |
//! | 16 | 8 | filesystem uuid |
//! | 24 | 8 | generation of the checkpoint that wrote the page |
//! | 32 | 8 | the page's own block |
//!
//! A leaf's payload is its entries in key order: key (17 bytes), value
//! length u16, value. A branch's is its first child (block u64,
//! generation u64), then for each further child its separator key and
//! the child (33 bytes): every key under a child is at least its
//! separator and below the next one.
//!
//! A parent names the generation of each child it points to, and the
//! child carries its own block: a page that was never written (a lost
//! or reordered write, the old contents of a reused block), or written to
//! the wrong place, fails the check even though its checksum is good.

use alloc::vec::Vec;

use super::{Key, Node, PageDamage, Ptr, KEY_LEN, MAX_LEVELS, MAX_VALUE};
use crate::persist::format::{crc32c, Dec, Enc};
use crate::units::PAGE_SIZE;

/// `"PIX1"` little-endian: the magic of every index page.
pub const PAGE_MAGIC: u32 = u32::from_le_bytes(*b"PIX1");
/// Bytes of the page header.
pub const HEADER: usize = 40;
/// Bytes of payload a page holds.
pub const PAYLOAD: usize = PAGE_SIZE - HEADER;
/// Bytes of a branch entry after the first: separator, block, generation.
pub const BRANCH_ENTRY: usize = KEY_LEN + 16;
/// Bytes of a branch's first entry: block, generation.
pub const BRANCH_FIRST: usize = 16;
/// Bytes a leaf entry takes beside its value: key and value length.
pub const LEAF_OVERHEAD: usize = KEY_LEN + 2;

/// Who wrote a page and where: what a page read back must carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The filesystem's uuid.
    pub uuid: u64,
    /// The generation of the checkpoint that wrote it.
    pub generation: u64,
    /// The block it was written to.
    pub block: u64,
}

fn put_key(e: &mut Enc, k: &Key) {
    e.u64(k.ino);
    e.u8(k.kind);
    e.u64(k.off);
}

fn get_key(d: &mut Dec<'_>) -> Result<Key, PageDamage> {
    let short = |_| PageDamage::Length;
    Ok(Key {
        ino: d.u64().map_err(short)?,
        kind: d.u8().map_err(short)?,
        off: d.u64().map_err(short)?,
    })
}

/// Encodes `node` as the page `stamp` describes. The node must fit
/// ([`Node::bytes`] at most [`PAYLOAD`]); the tree splits nodes before
/// they get there.
pub fn encode(node: &Node, stamp: Stamp) -> Vec<u8> {
    let mut p = Enc(Vec::with_capacity(PAGE_SIZE));
    p.0.resize(HEADER, 0);
    match node {
        Node::Leaf { keys, vals } => {
            for (k, v) in keys.iter().zip(vals) {
                put_key(&mut p, k);
                p.u16(v.len() as u16);
                p.bytes(v);
            }
        }
        Node::Branch { seps, kids, .. } => {
            for (i, kid) in kids.iter().enumerate() {
                if i > 0 {
                    put_key(&mut p, &seps[i - 1]);
                }
                let (block, generation) = match kid {
                    Ptr::Disk { block, generation } => (*block, *generation),
                    // The tree writes children first and points at them
                    // by block before it encodes their parent.
                    Ptr::Mem(_) => (0, 0),
                };
                p.u64(block);
                p.u64(generation);
            }
        }
    }
    let used = p.0.len() - HEADER;
    debug_assert!(used <= PAYLOAD);
    p.0.resize(PAGE_SIZE, 0);
    let mut h = Enc(Vec::with_capacity(HEADER));
    h.u32(PAGE_MAGIC);
    h.u8(node.level());
    h.u8(0);
    h.u16(node.len() as u16);
    h.u16(used as u16);
    h.u16(0);
    h.u32(0);
    h.u64(stamp.uuid);
    h.u64(stamp.generation);
    h.u64(stamp.block);
    p.0[..HEADER].copy_from_slice(&h.0);
    seal(&mut p.0);
    p.0
}

/// Where a page keeps its checksum.
const CRC: core::ops::Range<usize> = 12..16;

/// Sets the checksum of `page` (a whole page) to what [`decode`] computes:
/// CRC-32C of the page with the checksum's field zero. For [`encode`],
/// and for tests that craft pages with valid checksums.
pub fn seal(page: &mut [u8]) {
    if page.len() < HEADER {
        return;
    }
    page[CRC].fill(0);
    let crc = crc32c(&[page]);
    page[CRC].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes the page read from `expect.block`, which its parent (or the
/// superblock) says was written by checkpoint `expect.generation` of
/// filesystem `expect.uuid`. Every field is checked before it is used:
/// the result is a well-formed node (keys in order, values within
/// [`MAX_VALUE`], no pointer to block 0) or the reason it is not.
pub fn decode(bytes: &[u8], expect: Stamp) -> Result<Node, PageDamage> {
    if bytes.len() != PAGE_SIZE {
        return Err(PageDamage::Length);
    }
    let mut d = Dec::new(bytes);
    let short = |_| PageDamage::Length;
    if d.u32().map_err(short)? != PAGE_MAGIC {
        return Err(PageDamage::Magic);
    }
    let level = d.u8().map_err(short)?;
    let pad = d.u8().map_err(short)?;
    let count = usize::from(d.u16().map_err(short)?);
    let used = usize::from(d.u16().map_err(short)?);
    let pad2 = d.u16().map_err(short)?;
    let crc = d.u32().map_err(short)?;
    let computed = crc32c(&[&bytes[..CRC.start], &[0u8; 4], &bytes[CRC.end..]]);
    if crc != computed {
        return Err(PageDamage::Checksum);
    }
    let stamp = Stamp {
        uuid: d.u64().map_err(short)?,
        generation: d.u64().map_err(short)?,
        block: d.u64().map_err(short)?,
    };
    if stamp.uuid != expect.uuid {
        return Err(PageDamage::Uuid);
    }
    if stamp.block != expect.block {
        return Err(PageDamage::Misplaced {
            written_for: stamp.block,
        });
    }
    if stamp.generation != expect.generation {
        return Err(PageDamage::Stale {
            found: stamp.generation,
        });
    }
    if pad != 0 || pad2 != 0 || used > PAYLOAD || usize::from(level) >= MAX_LEVELS {
        return Err(PageDamage::Header);
    }
    if bytes[HEADER + used..].iter().any(|&b| b != 0) {
        return Err(PageDamage::Header);
    }
    let mut d = Dec::new(&bytes[HEADER..HEADER + used]);
    let node = if level == 0 {
        let mut keys = Vec::with_capacity(count);
        let mut vals = Vec::with_capacity(count);
        for _ in 0..count {
            let k = get_key(&mut d)?;
            let n = usize::from(d.u16().map_err(short)?);
            if n > MAX_VALUE {
                return Err(PageDamage::ValueTooLarge);
            }
            if keys.last().is_some_and(|last| *last >= k) {
                return Err(PageDamage::Order);
            }
            keys.push(k);
            vals.push(d.bytes(n).map_err(short)?.to_vec());
        }
        Node::Leaf { keys, vals }
    } else {
        if count < 2 {
            // Only a root may have one child, and the tree collapses
            // such a root before it writes it.
            return Err(PageDamage::Header);
        }
        let mut seps = Vec::with_capacity(count - 1);
        let mut kids = Vec::with_capacity(count);
        for i in 0..count {
            if i > 0 {
                let k = get_key(&mut d)?;
                if seps.last().is_some_and(|last| *last >= k) {
                    return Err(PageDamage::Order);
                }
                seps.push(k);
            }
            let block = d.u64().map_err(short)?;
            let generation = d.u64().map_err(short)?;
            if block == 0 || generation > stamp.generation {
                return Err(PageDamage::Pointer);
            }
            kids.push(Ptr::Disk { block, generation });
        }
        Node::Branch { level, seps, kids }
    };
    if d.remaining() != 0 {
        return Err(PageDamage::Length);
    }
    Ok(node)
}
