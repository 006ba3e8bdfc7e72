//! A model of the base image's metadata that structured mutations edit,
//! and writing it back: every frame and superblock the model changed is
//! written with a checksum that matches what a reader will check, whatever
//! its header now claims.

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::persist::format::{
    crc32c, Frame, CKPT_FRAME_MAX_BLOCKS, FEATURES, FRAME_HEADER, MAGIC, MAX_SEQUENCE,
    SUPERBLOCK_LEN, VERSION,
};
use pollfs_core::persist::index::MAX_LEVELS;
use pollfs_core::persist::record::Kind;
use pollfs_core::units::{PAGE_SIZE, PAGE_SIZE_U64};

use super::base::{Base, DEV_BYTES};
use super::edit::{RawOp, Region, SbField};
use super::tree::TreeModel;
use super::values::{encode, Cx, Entry, Rec, KIND_FILE};

/// Most frames a moved checkpoint is written as.
const MAX_CKPT_FRAMES: u64 = 64;

/// A frame header, every field free. `blocks` and `payload_len` are the
/// payload's own unless overridden.
#[derive(Clone, Debug)]
pub struct Head {
    /// Magic.
    pub magic: u64,
    /// Kind.
    pub kind: u32,
    /// Filesystem id.
    pub uuid: u64,
    /// Sequence number.
    pub lsn: u64,
    /// Blocks, if overridden.
    pub blocks: Option<u32>,
    /// Payload length, if overridden.
    pub payload_len: Option<u32>,
    /// The blocks the frame had in the base image.
    pub natural_blocks: u32,
    /// The payload length it had.
    pub natural_len: u32,
    /// Next checkpoint frame's block.
    pub next_block: u64,
    /// Next checkpoint frame's length.
    pub next_blocks: u32,
    /// Position in the checkpoint chain.
    pub index: u32,
}

impl From<&Frame> for Head {
    fn from(f: &Frame) -> Head {
        Head {
            magic: MAGIC,
            kind: f.kind,
            uuid: f.uuid,
            lsn: f.lsn,
            blocks: None,
            payload_len: None,
            natural_blocks: f.blocks,
            natural_len: f.payload_len,
            next_block: f.next.block,
            next_blocks: f.next.blocks,
            index: f.index,
        }
    }
}

/// Records, encoded, then cut short and followed by junk.
#[derive(Clone, Debug, Default)]
pub struct Payload {
    /// The records.
    pub recs: Vec<Rec>,
    /// Keep only this many encoded bytes.
    pub cut: Option<usize>,
    /// Bytes after them.
    pub junk: Vec<u8>,
}

impl Payload {
    fn bytes(&self) -> Vec<u8> {
        let mut b = encode(&self.recs);
        if let Some(cut) = self.cut {
            b.truncate(cut);
        }
        b.extend_from_slice(&self.junk);
        b
    }
}

/// A log write.
#[derive(Clone, Debug)]
pub struct LogItem {
    /// First block, relative to the log's start.
    pub at: u64,
    /// Header.
    pub head: Head,
    /// Records.
    pub payload: Payload,
    /// Changed: written back.
    pub dirty: bool,
}

/// A checkpoint frame.
#[derive(Clone, Debug)]
pub struct CkptItem {
    /// First block.
    pub block: u64,
    /// Blocks.
    pub blocks: u64,
    /// Header.
    pub head: Head,
}

/// The editable metadata of the image.
#[derive(Debug)]
pub struct Model {
    /// What values resolve against.
    pub cx: Cx,
    /// Superblock blocks 0 and 1 (their first `SUPERBLOCK_LEN` bytes).
    pub sb: [Vec<u8>; 2],
    sb_dirty: [bool; 2],
    newest: usize,
    /// Live log writes, in order, then appended ones.
    pub log: Vec<LogItem>,
    /// The chain of records the checkpoint carried beside the index.
    pub ckpt: Vec<CkptItem>,
    /// The carried records.
    pub ckpt_stream: Payload,
    /// The chain changed: every frame is written back.
    pub ckpt_dirty: bool,
    /// The metadata index.
    pub tree: TreeModel,
}

fn sb_bytes(bytes: &[u8], copy: usize) -> Vec<u8> {
    bytes[copy * PAGE_SIZE..copy * PAGE_SIZE + SUPERBLOCK_LEN].to_vec()
}

impl Model {
    /// The model of `base`.
    pub fn new(base: &Base) -> Model {
        let mut known: Vec<u64> = Vec::new();
        let mut names: Vec<Vec<u8>> = Vec::new();
        let recs = base
            .tree_records
            .iter()
            .chain(&base.ckpt_records)
            .chain(base.log.iter().flat_map(|f| f.records.iter()));
        for r in recs.map(Rec::from) {
            known.extend([r.ino, r.parent, r.to].into_iter().filter(|&x| x != 0));
            known.extend(r.extents.iter().map(|x| x[1]));
            names.extend(
                [&r.name, &r.to_name]
                    .into_iter()
                    .filter(|t| !t.bytes.is_empty())
                    .map(|t| t.bytes.clone()),
            );
        }
        known.extend(base.log.iter().map(|f| f.frame.lsn));
        known.extend(base.ckpt.iter().map(|f| f.block));
        known.extend(base.tree.pages.iter().map(|p| p.0));
        known.extend([base.tree.root.generation]);
        known.sort_unstable();
        known.dedup();
        names.sort();
        names.dedup();
        let shadow = &base.shadow;
        let inos: Vec<u64> = shadow.inodes.keys().copied().collect();
        let dirs: Vec<u64> = shadow
            .inodes
            .iter()
            .filter(|(_, m)| m.kind == Kind::Dir)
            .map(|(&i, _)| i)
            .collect();
        let entries = shadow
            .tree
            .entries()
            .map(|(parent, name, ino)| Entry {
                parent,
                name: name.as_bytes().to_vec(),
                ino,
            })
            .collect();
        let log = base
            .log
            .iter()
            .map(|f| LogItem {
                at: f.block,
                head: Head::from(&f.frame),
                payload: Payload {
                    recs: f.records.iter().map(Rec::from).collect(),
                    ..Payload::default()
                },
                dirty: false,
            })
            .collect();
        let ckpt = base
            .ckpt
            .iter()
            .map(|f| CkptItem {
                block: f.block,
                blocks: f.blocks,
                head: Head::from(&f.frame),
            })
            .collect();
        Model {
            cx: Cx {
                layout: base.sb.layout,
                known,
                inos,
                dirs,
                names,
                entries,
            },
            sb: [sb_bytes(&base.bytes, 0), sb_bytes(&base.bytes, 1)],
            sb_dirty: [false; 2],
            newest: (base.sb.generation % 2) as usize,
            log,
            ckpt,
            ckpt_stream: Payload {
                recs: base.ckpt_records.iter().map(Rec::from).collect(),
                ..Payload::default()
            },
            ckpt_dirty: false,
            tree: base.tree.clone(),
        }
    }

    /// Which superblock block is the newest copy (or the other).
    pub fn sb_copy(&self, newest: bool) -> usize {
        if newest {
            self.newest
        } else {
            1 - self.newest
        }
    }

    /// Recomputes a superblock copy's checksum after an edit.
    pub fn seal_superblock(&mut self, copy: usize) {
        let sb = &mut self.sb[copy];
        let crc = crc32c(&[&sb[..SUPERBLOCK_LEN - 4]]);
        sb[SUPERBLOCK_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
        self.sb_dirty[copy] = true;
    }

    /// The sequence number after the last log write.
    pub fn next_lsn(&self) -> u64 {
        self.log.last().map_or(0, |l| l.head.lsn.wrapping_add(1))
    }

    /// Appends a log write where the writer would put it: after the last
    /// one, or at the log's start if it does not fit before the end.
    pub fn append(&mut self, lsn: u64, payload: Payload) {
        let log_blocks = self.cx.layout.log_blocks;
        let n = Frame::blocks_for(payload.bytes().len());
        let pos = self.log.last().map_or(0, |l| {
            (l.at + Frame::blocks_for(l.payload.bytes().len())) % log_blocks
        });
        let mut head = self.log.first().map_or_else(
            || Head::from(&Frame::log(0, 0)),
            |l| Head {
                blocks: None,
                payload_len: None,
                ..l.head.clone()
            },
        );
        head.lsn = lsn;
        self.log.push(LogItem {
            at: if pos + n <= log_blocks { pos } else { 0 },
            head,
            payload,
            dirty: true,
        });
    }

    /// Points the newest superblock at the tree's root, with a valid
    /// checksum.
    pub fn point_at_tree(&mut self) {
        let copy = self.newest;
        let root = self.tree.root;
        self.sb_set(copy, SbField::RootBlock, root.block);
        self.sb_set(copy, SbField::RootGeneration, root.generation);
        self.sb_set(copy, SbField::RootLevel, u64::from(root.level));
        self.seal_superblock(copy);
    }

    /// Rewrites the carried records as equal frames of `frame_blocks` blocks from
    /// `block` on, and points the newest superblock at it.
    pub fn move_checkpoint(&mut self, block: u64, frame_blocks: u64) {
        let len = self.ckpt_stream.bytes().len() as u64;
        let per = Frame::capacity(frame_blocks) as u64;
        let n = len.div_ceil(per).clamp(1, MAX_CKPT_FRAMES);
        let template = self.ckpt[0].head.clone();
        self.ckpt = (0..n)
            .map(|i| {
                let at = block.wrapping_add(i * frame_blocks);
                let last = i + 1 == n;
                CkptItem {
                    block: at,
                    blocks: frame_blocks,
                    head: Head {
                        blocks: None,
                        payload_len: None,
                        next_block: if last {
                            0
                        } else {
                            at.wrapping_add(frame_blocks)
                        },
                        next_blocks: if last { 0 } else { frame_blocks as u32 },
                        index: i as u32,
                        ..template.clone()
                    },
                }
            })
            .collect();
        self.ckpt_dirty = true;
        let copy = self.newest;
        self.sb_set(copy, SbField::CarryBlock, block);
        self.sb_set(copy, SbField::CarryBlocks, frame_blocks);
        self.sb_set(copy, SbField::CarryTotal, n * frame_blocks);
        self.seal_superblock(copy);
    }

    /// Byte offset and width of a superblock field, and the limit the
    /// decoder or the layout sets for it.
    fn sb_field(&self, f: SbField) -> (usize, usize, u64) {
        let l = self.cx.layout;
        match f {
            SbField::Magic => (0, 8, MAGIC),
            SbField::Version => (8, 4, u64::from(VERSION)),
            SbField::Features => (12, 4, u64::from(FEATURES)),
            SbField::Uuid => (16, 8, 0),
            SbField::Generation => (24, 8, MAX_SEQUENCE),
            SbField::LbaSize => (32, 4, 4096),
            SbField::Blocks => (36, 8, l.blocks),
            SbField::LogStart => (44, 8, l.log_start),
            SbField::LogBlocks => (52, 8, l.log_blocks),
            SbField::DataStart => (60, 8, l.data_start),
            SbField::RootBlock => (68, 8, l.blocks),
            SbField::RootGeneration => (76, 8, MAX_SEQUENCE),
            SbField::RootLevel => (84, 4, MAX_LEVELS as u64),
            SbField::CarryBlock => (88, 8, l.blocks),
            SbField::CarryBlocks => (96, 4, CKPT_FRAME_MAX_BLOCKS),
            SbField::CarryTotal => (100, 8, l.blocks - l.data_start),
            SbField::CkptLsn => (108, 8, MAX_SEQUENCE),
            SbField::LogHead => (116, 8, l.log_blocks),
            SbField::HashKey(second) => (124 + 8 * usize::from(second), 8, u64::MAX),
        }
    }

    /// A superblock field's value in `copy`, and its limit.
    pub fn sb_get(&self, copy: usize, f: SbField) -> (u64, u64) {
        let (at, width, limit) = self.sb_field(f);
        let mut cur = [0u8; 8];
        cur[..width].copy_from_slice(&self.sb[copy][at..at + width]);
        (u64::from_le_bytes(cur), limit)
    }

    /// Sets a superblock field in `copy` (truncated to its width); the
    /// caller seals the copy.
    pub fn sb_set(&mut self, copy: usize, f: SbField, v: u64) {
        let (at, width, _) = self.sb_field(f);
        self.sb[copy][at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
    }

    /// File offsets worth reading after a mount: every size and extent
    /// edge any file's inode record in the model names.
    pub fn offsets(&self) -> Vec<u64> {
        let mut out = vec![0];
        let recs = self
            .tree
            .recs
            .iter()
            .chain(&self.ckpt_stream.recs)
            .chain(self.log.iter().flat_map(|l| l.payload.recs.iter()));
        for r in recs.filter(|r| r.is_inode(KIND_FILE)) {
            out.push(r.size.saturating_sub(1));
            for x in &r.extents {
                out.push(x[0].saturating_mul(PAGE_SIZE_U64));
                out.push(
                    x[0].saturating_add(x[2])
                        .saturating_mul(PAGE_SIZE_U64)
                        .saturating_sub(1),
                );
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Writes what the model changed onto `dev`, then applies the raw
    /// changes in order.
    pub fn write(&self, dev: &RamDevice, raw: &[(Region, u32, RawOp)]) {
        for copy in 0..2 {
            if self.sb_dirty[copy] {
                put(dev, copy as u64 * PAGE_SIZE_U64, &self.sb[copy]);
            }
        }
        let log_start = self.cx.layout.log_start;
        for l in self.log.iter().filter(|l| l.dirty) {
            write_frame(
                dev,
                log_start.saturating_add(l.at),
                &l.head,
                &l.payload.bytes(),
            );
        }
        if self.ckpt_dirty {
            let stream = self.ckpt_stream.bytes();
            let mut at = 0;
            for c in &self.ckpt {
                let take = Frame::capacity(c.blocks).min(stream.len() - at);
                write_frame(dev, c.block, &c.head, &stream[at..at + take]);
                at += take;
            }
        }
        if self.tree.dirty {
            for (block, page) in &self.tree.pages {
                if let Some(pos) = block.checked_mul(PAGE_SIZE_U64) {
                    put(dev, pos, page);
                }
            }
        }
        for &(region, offset, op) in raw {
            let Some(pos) = self.locate(region, offset) else {
                continue;
            };
            let block = pos / PAGE_SIZE_U64 * PAGE_SIZE_U64;
            match op {
                RawOp::Xor(x) => {
                    let mut b = [0u8];
                    dev.read_raw(pos, &mut b);
                    put(dev, pos, &[b[0] ^ x]);
                }
                RawOp::Set(x) => put(dev, pos, &[x]),
                RawOp::U32(x) => put(dev, pos, &x.to_le_bytes()),
                RawOp::U64(x) => put(dev, pos, &x.to_le_bytes()),
                RawOp::ZeroBlock => put(dev, block, &[0u8; PAGE_SIZE]),
                RawOp::CopyBlock(from, off) => {
                    if let Some(src) = self.locate(from, off) {
                        let mut b = vec![0u8; PAGE_SIZE];
                        dev.read_raw(src / PAGE_SIZE_U64 * PAGE_SIZE_U64, &mut b);
                        put(dev, block, &b);
                    }
                }
            }
        }
    }

    /// The device byte that `offset` names in `region`.
    fn locate(&self, region: Region, offset: u32) -> Option<u64> {
        let l = self.cx.layout;
        let off = u64::from(offset);
        let frame = |block: u64, h: &Head, len: usize| {
            let len = h.payload_len.map_or(len as u64, u64::from);
            let start = block.checked_mul(PAGE_SIZE_U64)?;
            start.checked_add(off % (FRAME_HEADER as u64 + len))
        };
        Some(match region {
            Region::Superblock(newest) => {
                self.sb_copy(newest) as u64 * PAGE_SIZE_U64 + off % SUPERBLOCK_LEN as u64
            }
            Region::Log => l.log_start * PAGE_SIZE_U64 + off % (l.log_blocks * PAGE_SIZE_U64),
            Region::LogFrame(i) => {
                let item = self.log.get(usize::from(i) % self.log.len().max(1))?;
                frame(
                    l.log_start + item.at,
                    &item.head,
                    item.payload.bytes().len(),
                )?
            }
            Region::CkptFrame(i) => {
                let item = self.ckpt.get(usize::from(i) % self.ckpt.len().max(1))?;
                let len = Frame::capacity(item.blocks);
                frame(item.block, &item.head, len)?
            }
            Region::TreePage(i) => {
                let n = self.tree.pages.len().max(1);
                let (block, _) = self.tree.pages.get(usize::from(i) % n)?;
                block
                    .checked_mul(PAGE_SIZE_U64)?
                    .checked_add(off % PAGE_SIZE_U64)?
            }
            Region::Data => {
                l.data_start * PAGE_SIZE_U64 + off % ((l.blocks - l.data_start) * PAGE_SIZE_U64)
            }
            Region::Anywhere => off % DEV_BYTES,
        })
    }
}

/// Writes `bytes` at `pos`, dropping what falls past the device's end.
fn put(dev: &RamDevice, pos: u64, bytes: &[u8]) {
    if pos >= DEV_BYTES {
        return;
    }
    let n = (DEV_BYTES - pos).min(bytes.len() as u64) as usize;
    dev.write_raw(pos, &bytes[..n]);
}

/// Writes a frame with header `h` and `payload` at `block`, then sets its
/// checksum over the header and the `payload_len` bytes the header now
/// claims, as a reader will compute it.
fn write_frame(dev: &RamDevice, block: u64, h: &Head, payload: &[u8]) {
    let Some(pos) = block.checked_mul(PAGE_SIZE_U64).filter(|&p| p < DEV_BYTES) else {
        return;
    };
    let blocks = h.blocks.unwrap_or(Frame::blocks_for(payload.len()) as u32);
    let payload_len = h.payload_len.unwrap_or(payload.len() as u32);
    let mut head = Vec::with_capacity(FRAME_HEADER);
    head.extend_from_slice(&h.magic.to_le_bytes());
    head.extend_from_slice(&h.kind.to_le_bytes());
    head.extend_from_slice(&h.uuid.to_le_bytes());
    head.extend_from_slice(&h.lsn.to_le_bytes());
    head.extend_from_slice(&blocks.to_le_bytes());
    head.extend_from_slice(&payload_len.to_le_bytes());
    head.extend_from_slice(&h.next_block.to_le_bytes());
    head.extend_from_slice(&h.next_blocks.to_le_bytes());
    head.extend_from_slice(&h.index.to_le_bytes());
    let mut bytes = head.clone();
    bytes.extend_from_slice(&[0; 4]);
    bytes.extend_from_slice(payload);
    bytes.resize(Frame::blocks_for(payload.len()) as usize * PAGE_SIZE, 0);
    put(dev, pos, &bytes);
    // The checksum a reader computes: over the claimed payload as it now
    // lies on the device (if the claim fits on the device at all).
    let start = pos + FRAME_HEADER as u64;
    let claimed = u64::from(payload_len);
    if start + claimed <= DEV_BYTES {
        let mut p = vec![0u8; claimed as usize];
        dev.read_raw(start, &mut p);
        let crc = crc32c(&[&head, &p]);
        put(dev, pos + FRAME_HEADER as u64 - 4, &crc.to_le_bytes());
    }
}
