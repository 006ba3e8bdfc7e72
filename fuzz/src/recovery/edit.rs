//! The changes a `recovery` input makes to the base image. Structured
//! changes edit a model of the image (both superblocks, the live log
//! writes, the checkpoint chain and its records) and are written back with
//! valid checksums; raw byte changes are applied afterwards, on top.

use arbitrary::Arbitrary;
use pollfs_core::persist::format::{
    Frame, CKPT_FRAME_MAX_BLOCKS, FRAME_CKPT, FRAME_LOG, MAGIC, MAX_SEQUENCE, SUPERBLOCK_LEN,
};
use pollfs_core::units::{MAX_FILE_PAGES, MAX_FILE_SIZE, MAX_INODE, MAX_NAME_LEN, PAGE_SIZE};

use super::model::{Head, Model, Payload};
use super::values::{Cx, Rec, Value, TAG_CREATE, TAG_REMOVE, TAG_RENAME, TAG_STATE};

/// Most mutations applied per input (and records or extents per list).
pub const MAX_MUTATIONS: usize = 16;
const MAX_LIST: usize = 8;

/// One field of a record.
#[derive(Arbitrary, Clone, Debug)]
pub enum Field {
    /// The record type byte.
    Tag(u8),
    /// The inode number.
    Ino(Value),
    /// The size (State).
    Size(Value),
    /// The encoded extent count, whatever the extents are (State).
    Count(Value),
    /// The encoded name length, whatever the name is.
    NameLen(Value),
    /// One byte of the name (NUL, '/', bytes that are not UTF-8...).
    NameByte(u8, u8),
    /// The name, made this long.
    NameLength(u16),
    /// The name, replaced by one the image uses (or a fresh one).
    Name(u8),
    /// An extent's first file block.
    ExtentFile(u8, Value),
    /// An extent's first device block.
    ExtentDev(u8, Value),
    /// An extent's length.
    ExtentLen(u8, Value),
    /// A new last extent: file block, device block, length.
    AddExtent(Value, Value, Value),
    /// One extent removed.
    DropExtent(u8),
}

/// A record made from nothing.
#[derive(Arbitrary, Clone, Debug)]
pub enum NewRec {
    /// Create: inode, name.
    Create(Value, u8),
    /// Remove: inode.
    Remove(Value),
    /// Rename: inode, name.
    Rename(Value, u8),
    /// State: inode, size, extents.
    State(Value, Value, Vec<(Value, Value, Value)>),
}

/// A change to a list of records (a log write's, or the checkpoint's).
#[derive(Arbitrary, Clone, Debug)]
pub enum RecEdit {
    /// One field of one record.
    Field(u8, Field),
    /// A record removed.
    Drop(u8),
    /// A record repeated.
    Dup(u8),
    /// Two records swapped.
    Swap(u8, u8),
    /// A new record inserted.
    Insert(u8, NewRec),
    /// The encoded payload cut short.
    Cut(u16),
    /// Bytes appended to the encoded payload.
    Junk(Vec<u8>),
}

/// A frame header field (rewritten with a valid checksum).
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum HeaderField {
    /// Magic.
    Magic(Value),
    /// Kind (log or checkpoint).
    Kind(Value),
    /// Filesystem id.
    Uuid(Value),
    /// Sequence number.
    Lsn(Value),
    /// Blocks the frame says it spans.
    Blocks(Value),
    /// Payload bytes the frame says it holds.
    PayloadLen(Value),
    /// The next checkpoint frame's block.
    NextBlock(Value),
    /// The next checkpoint frame's length.
    NextBlocks(Value),
    /// Position in the checkpoint chain.
    Index(Value),
}

/// A superblock field.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum SbField {
    /// Magic.
    Magic,
    /// Format version.
    Version,
    /// Feature flags.
    Features,
    /// Filesystem id.
    Uuid,
    /// Generation.
    Generation,
    /// Device block size.
    LbaSize,
    /// Filesystem blocks.
    Blocks,
    /// First log block.
    LogStart,
    /// Log blocks.
    LogBlocks,
    /// First data block.
    DataStart,
    /// First checkpoint frame's block.
    CkptBlock,
    /// First checkpoint frame's length.
    CkptBlocks,
    /// Blocks of the checkpoint chain.
    CkptTotal,
    /// Sequence number the checkpoint includes.
    CkptLsn,
    /// Where replay starts.
    LogHead,
}

/// A change to one superblock copy.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum SbEdit {
    /// One field, with a valid checksum.
    Field(SbField, Value),
    /// The other copy's bytes.
    Copy,
    /// Zeros.
    Zero,
}

/// A part of the image, for raw byte changes.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Region {
    /// A superblock copy's encoded bytes (the newest or the other).
    Superblock(bool),
    /// The whole log.
    Log,
    /// A log write's header and payload, by index.
    LogFrame(u8),
    /// A checkpoint frame's header and payload, by index.
    CkptFrame(u8),
    /// The data area.
    Data,
    /// Anywhere on the device.
    Anywhere,
}

/// A raw change at a byte of a region.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum RawOp {
    /// XOR one byte.
    Xor(u8),
    /// Set one byte.
    Set(u8),
    /// Set four bytes (little-endian).
    U32(u32),
    /// Set eight bytes (little-endian).
    U64(u64),
    /// Zero the block holding the byte.
    ZeroBlock,
    /// Copy the block holding a byte of another region over this block.
    CopyBlock(Region, u32),
}

/// One change to the image.
#[derive(Arbitrary, Clone, Debug)]
pub enum Mutation {
    /// Raw bytes (checksums are not fixed).
    Raw(Region, u32, RawOp),
    /// A superblock copy: the newest (true) or the other.
    Superblock(bool, SbEdit),
    /// A live log write's header.
    LogHeader(u8, HeaderField),
    /// A live log write's records.
    LogRecords(u8, RecEdit),
    /// A live log write, written again at another log block.
    LogMove(u8, Value),
    /// A new log write after the last: sequence number (`Current` is the
    /// next one), the records of a live write to start from, new records.
    Append(Value, Option<u8>, Vec<NewRec>),
    /// A checkpoint frame's header.
    CkptHeader(u8, HeaderField),
    /// The checkpoint's records.
    CkptRecords(RecEdit),
    /// The checkpoint written again as a chain of equal frames from a
    /// block, the newest superblock pointing at it.
    CkptMove(Value, u8),
}

fn pick<T>(v: &mut [T], i: u8) -> Option<&mut T> {
    let n = v.len();
    (n > 0).then(|| &mut v[usize::from(i) % n])
}

fn field(cx: &Cx, r: &mut Rec, f: &Field) {
    match *f {
        Field::Tag(t) => r.tag = t,
        Field::Ino(v) => r.ino = cx.resolve(v, r.ino, MAX_INODE),
        Field::Size(v) => r.size = cx.resolve(v, r.size, MAX_FILE_SIZE),
        Field::Count(v) => {
            r.count = cx.resolve(v, u64::from(r.count), r.extents.len() as u64) as u32
        }
        Field::NameLen(v) => {
            r.name_len = cx.resolve(v, u64::from(r.name_len), MAX_NAME_LEN as u64) as u16;
        }
        Field::NameByte(i, b) => {
            if let Some(x) = pick(&mut r.name, i) {
                *x = b;
            }
        }
        Field::NameLength(n) => {
            let mut name = r.name.clone();
            name.resize(usize::from(n) % (2 * MAX_NAME_LEN + 2), b'n');
            r.set_name(name);
        }
        Field::Name(seed) => r.set_name(cx.name(seed)),
        Field::ExtentFile(i, v) => {
            if let Some(x) = pick(&mut r.extents, i) {
                x[0] = cx.resolve(v, x[0], MAX_FILE_PAGES);
            }
        }
        Field::ExtentDev(i, v) => {
            if let Some(x) = pick(&mut r.extents, i) {
                x[1] = cx.resolve(v, x[1], cx.layout.blocks);
            }
        }
        Field::ExtentLen(i, v) => {
            if let Some(x) = pick(&mut r.extents, i) {
                x[2] = cx.resolve(v, x[2], MAX_FILE_PAGES);
            }
        }
        Field::AddExtent(f, d, l) => {
            let (fb, dev) = r.extents.last().map_or((0, free_block(cx, 0)), |x| {
                (x[0].wrapping_add(x[2]), x[1].wrapping_add(x[2]))
            });
            r.extents.push([
                cx.resolve(f, fb, MAX_FILE_PAGES),
                cx.resolve(d, dev, cx.layout.blocks),
                cx.resolve(l, 1, MAX_FILE_PAGES),
            ]);
            r.count = r.extents.len() as u32;
        }
        Field::DropExtent(i) => {
            if !r.extents.is_empty() {
                r.extents.remove(usize::from(i) % r.extents.len());
                r.count = r.extents.len() as u32;
            }
        }
    }
}

/// A block near the end of the device, which the base image leaves free.
fn free_block(cx: &Cx, i: u64) -> u64 {
    cx.layout.blocks - 1 - (i % 64)
}

fn new_rec(cx: &Cx, n: &NewRec) -> Rec {
    let fresh = cx
        .known
        .iter()
        .copied()
        .filter(|&k| k <= MAX_INODE)
        .max()
        .unwrap_or(0)
        + 1;
    let ino = |v| cx.resolve(v, fresh, MAX_INODE);
    let mut r = Rec::default();
    match n {
        NewRec::Create(v, s) | NewRec::Rename(v, s) => {
            r.tag = if matches!(n, NewRec::Create(..)) {
                TAG_CREATE
            } else {
                TAG_RENAME
            };
            r.ino = ino(*v);
            r.set_name(cx.name(*s));
        }
        NewRec::Remove(v) => {
            r.tag = TAG_REMOVE;
            r.ino = ino(*v);
        }
        NewRec::State(v, size, extents) => {
            r.tag = TAG_STATE;
            r.ino = ino(*v);
            for (i, &(f, d, l)) in extents.iter().take(MAX_LIST).enumerate() {
                let i = i as u64;
                r.extents.push([
                    cx.resolve(f, i, MAX_FILE_PAGES),
                    cx.resolve(d, free_block(cx, i), cx.layout.blocks),
                    cx.resolve(l, 1, MAX_FILE_PAGES),
                ]);
            }
            r.count = r.extents.len() as u32;
            let mapped = r.extents.len() as u64 * PAGE_SIZE as u64;
            r.size = cx.resolve(*size, mapped, MAX_FILE_SIZE);
        }
    }
    r
}

fn rec_edit(cx: &Cx, p: &mut Payload, e: &RecEdit) {
    let n = p.recs.len();
    let at = |i: u8| usize::from(i) % n.max(1);
    match e {
        RecEdit::Field(i, f) => {
            if let Some(r) = pick(&mut p.recs, *i) {
                field(cx, r, f);
            }
        }
        RecEdit::Drop(i) if n > 0 => {
            p.recs.remove(at(*i));
        }
        RecEdit::Dup(i) if n > 0 => {
            let r = p.recs[at(*i)].clone();
            p.recs.insert(at(*i), r);
        }
        RecEdit::Swap(i, j) if n > 0 => p.recs.swap(at(*i), at(*j)),
        RecEdit::Insert(i, r) => {
            let r = new_rec(cx, r);
            p.recs.insert(usize::from(*i) % (n + 1), r);
        }
        RecEdit::Cut(k) => p.cut = Some(usize::from(*k)),
        RecEdit::Junk(b) => p.junk.extend(b.iter().take(64)),
        _ => {}
    }
}

fn header(cx: &Cx, h: &mut Head, f: HeaderField, log: bool, frames: usize) {
    let (other, max_blocks) = if log {
        (FRAME_CKPT, cx.layout.log_frame_max())
    } else {
        (FRAME_LOG, CKPT_FRAME_MAX_BLOCKS)
    };
    let u32v = |v, cur: u32, lim: u64| cx.resolve(v, u64::from(cur), lim) as u32;
    match f {
        HeaderField::Magic(v) => h.magic = cx.resolve(v, h.magic, MAGIC),
        HeaderField::Kind(v) => h.kind = u32v(v, h.kind, u64::from(other)),
        HeaderField::Uuid(v) => h.uuid = cx.resolve(v, h.uuid, h.uuid),
        HeaderField::Lsn(v) => h.lsn = cx.resolve(v, h.lsn, MAX_SEQUENCE),
        HeaderField::Blocks(v) => {
            let cur = h.blocks.unwrap_or(h.natural_blocks);
            h.blocks = Some(u32v(v, cur, max_blocks));
        }
        HeaderField::PayloadLen(v) => {
            let blocks = u64::from(h.blocks.unwrap_or(h.natural_blocks));
            let cur = h.payload_len.unwrap_or(h.natural_len);
            h.payload_len = Some(u32v(v, cur, Frame::capacity(blocks) as u64));
        }
        HeaderField::NextBlock(v) => h.next_block = cx.resolve(v, h.next_block, cx.layout.blocks),
        HeaderField::NextBlocks(v) => h.next_blocks = u32v(v, h.next_blocks, CKPT_FRAME_MAX_BLOCKS),
        HeaderField::Index(v) => h.index = u32v(v, h.index, frames as u64),
    }
}

/// Applies the structured mutations of `muts` to `m`.
pub fn apply(m: &mut Model, muts: &[Mutation]) {
    let cx = m.cx.clone();
    for mu in muts {
        match mu {
            Mutation::Raw(..) => {}
            Mutation::Superblock(newest, edit) => {
                let copy = m.sb_copy(*newest);
                match *edit {
                    SbEdit::Field(f, v) => {
                        let (cur, limit) = m.sb_get(copy, f);
                        m.sb_set(copy, f, cx.resolve(v, cur, limit));
                    }
                    SbEdit::Copy => m.sb[copy] = m.sb[1 - copy].clone(),
                    SbEdit::Zero => m.sb[copy][..SUPERBLOCK_LEN].fill(0),
                }
                m.seal_superblock(copy);
            }
            Mutation::LogHeader(i, f) => {
                if let Some(item) = pick(&mut m.log, *i) {
                    header(&cx, &mut item.head, *f, true, 1);
                    item.dirty = true;
                }
            }
            Mutation::LogRecords(i, e) => {
                if let Some(item) = pick(&mut m.log, *i) {
                    rec_edit(&cx, &mut item.payload, e);
                    item.dirty = true;
                }
            }
            Mutation::LogMove(i, v) => {
                let blocks = cx.layout.log_blocks;
                if let Some(item) = pick(&mut m.log, *i) {
                    item.at = cx.resolve(*v, item.at, blocks) % blocks;
                    item.dirty = true;
                }
            }
            Mutation::Append(lsn, copy, recs) => {
                let mut payload = Payload::default();
                if let Some(c) = copy {
                    if let Some(item) = pick(&mut m.log, *c) {
                        payload.recs = item.payload.recs.clone();
                    }
                }
                payload
                    .recs
                    .extend(recs.iter().take(MAX_LIST).map(|r| new_rec(&cx, r)));
                let next = m.next_lsn();
                let lsn = cx.resolve(*lsn, next, MAX_SEQUENCE);
                m.append(lsn, payload);
            }
            Mutation::CkptHeader(i, f) => {
                let frames = m.ckpt.len();
                if let Some(item) = pick(&mut m.ckpt, *i) {
                    header(&cx, &mut item.head, *f, false, frames);
                    m.ckpt_dirty = true;
                }
            }
            Mutation::CkptRecords(e) => {
                rec_edit(&cx, &mut m.ckpt_stream, e);
                m.ckpt_dirty = true;
            }
            Mutation::CkptMove(v, frame_blocks) => {
                let at = cx.resolve(*v, free_block(&cx, 15), cx.layout.blocks);
                m.move_checkpoint(at, 1 + u64::from(*frame_blocks % 4));
            }
        }
    }
}
