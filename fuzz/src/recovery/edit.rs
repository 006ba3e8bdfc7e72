//! The changes a `recovery` input makes to the base image. Structured
//! changes edit a model of the image (both superblocks, the live log
//! writes, the metadata index's pages and the records it holds, the chain
//! of records the checkpoint carried) and are written back with valid
//! checksums; raw byte changes are applied afterwards, on top. Tree edits
//! damage the namespace the index holds while keeping every item
//! decodable, so the damage reaches check, mount and repair.

use arbitrary::Arbitrary;
use pollfs_core::persist::format::{
    Frame, CKPT_FRAME_MAX_BLOCKS, FRAME_CKPT, FRAME_LOG, MAGIC, MAX_SEQUENCE, SUPERBLOCK_LEN,
};
use pollfs_core::persist::xattr::{NAME_MAX as XATTR_NAME_MAX, VALUE_MAX as XATTR_VALUE_MAX};
use pollfs_core::units::{
    MAX_FILE_PAGES, MAX_FILE_SIZE, MAX_INODE, MAX_LINKS, MAX_NAME_LEN, MAX_SYMLINK_LEN, PAGE_SIZE,
};

use super::model::{Head, Model, Payload};
use super::tree::{seal, TreeModel};
use super::values::{
    Cx, Rec, Text, Value, KIND_DIR, KIND_FILE, KIND_SYMLINK, TAG_FREE, TAG_IMAGE_END, TAG_INODE,
    TAG_LINK, TAG_RENAME, TAG_UNLINK, TAG_XATTR,
};

/// Most mutations applied per input (and records or extents per list).
pub const MAX_MUTATIONS: usize = 16;
const MAX_LIST: usize = 8;

/// Which length-prefixed bytes of a record.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Which {
    /// The entry's name (Link, Unlink; Rename's source name).
    Name,
    /// Rename's destination name.
    ToName,
    /// A symbolic link's target.
    Target,
}

/// A change to length-prefixed bytes.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum TextEdit {
    /// The encoded length, whatever the bytes are.
    Len(Value),
    /// One byte (NUL, '/', bytes that are not UTF-8...).
    Byte(u8, u8),
    /// The bytes, made this long (the encoded length follows).
    Length(u16),
    /// The bytes replaced by a name the image uses, one the decoder must
    /// refuse ("." "..", with '/' or NUL, empty), or a fresh one.
    Pick(u8),
}

/// One field of a record.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Field {
    /// The record type byte.
    Tag(u8),
    /// The inode number (Inode, Link, Free).
    Ino(Value),
    /// The directory (Link, Unlink, Rename), or a directory's parent.
    Parent(Value),
    /// Rename's destination directory.
    To(Value),
    /// Rename's flags byte.
    Flags(u8),
    /// The inode kind code (the encoding follows it).
    Kind(u8),
    /// Permission bits.
    Perm(Value),
    /// Owner (true) or group.
    Owner(bool, Value),
    /// Link count.
    Nlink(Value),
    /// Size.
    Size(Value),
    /// Access, modification or change time (index mod 3).
    Time(u8, Value),
    /// A name or the link target.
    Text(Which, TextEdit),
    /// The encoded extent count, whatever the extents are.
    Count(Value),
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

/// A record made from nothing, or from an entry of the base image.
#[derive(Arbitrary, Clone, Debug)]
pub enum NewRec {
    /// Inode: number, kind code, link count, parent, size, extents (the
    /// rest as a fresh inode's).
    Inode(Value, u8, Value, Value, Value, Vec<(Value, Value, Value)>),
    /// Link: directory, inode, name.
    Link(Value, Value, u8),
    /// Unlink: directory, name.
    Unlink(Value, u8),
    /// Rename: source directory and name, destination directory and
    /// name, flags byte.
    Rename(Value, u8, Value, u8, u8),
    /// Free: inode.
    Free(Value),
    /// A checkpoint image's end marker.
    ImageEnd,
    /// An entry of the image unlinked.
    UnlinkEntry(u8),
    /// An entry of the image renamed into a directory, under a name
    /// (flags byte; a directory moved under itself makes a cycle).
    MoveEntry(u8, Value, u8, u8),
    /// An entry's inode linked again into a directory, under a name (a
    /// directory gets a second entry).
    LinkAgain(u8, Value, u8),
    /// An entry's inode freed while it is linked.
    FreeEntry(u8),
    /// Xattr: inode, name (see [`xattr_name`]), set (odd) or remove
    /// (even), value length (see [`xattr_len`]).
    Xattr(Value, u8, u8, u16),
}

/// An extended attribute's name: one of each namespace, an ACL's, the
/// longest there may be, and names the engine refuses (too long, no
/// namespace, an empty one, an unknown `system.` name).
fn xattr_name(which: u8) -> Vec<u8> {
    let long = |n: usize| {
        let mut v = b"user.".to_vec();
        v.resize(n, b'n');
        v
    };
    match which % 10 {
        0 => b"user.a".to_vec(),
        1 => b"trusted.b".to_vec(),
        2 => b"security.c".to_vec(),
        3 => b"system.posix_acl_access".to_vec(),
        4 => b"system.posix_acl_default".to_vec(),
        5 => long(XATTR_NAME_MAX),
        6 => long(XATTR_NAME_MAX + 1),
        7 => b"user.".to_vec(),
        8 => b"other.x".to_vec(),
        _ => b"system.other".to_vec(),
    }
}

/// A value's length: as given (small), or at and past the limit.
fn xattr_len(len: u16) -> usize {
    match len % 64 {
        0 => XATTR_VALUE_MAX,
        1 => XATTR_VALUE_MAX + 1,
        _ => usize::from(len) % 4096,
    }
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

/// Damage to the tree the checkpoint image holds, each change keeping
/// every record decodable.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum TreeEdit {
    /// An entry made to name another inode (none, the root, itself...).
    Retarget(u8, Value),
    /// An entry moved into another directory (a cycle, if under itself).
    Reparent(u8, Value),
    /// A second entry for an entry's inode, in a directory, under a name.
    SecondEntry(u8, Value, u8),
    /// An entry dropped (its inode unreachable, or counted wrong).
    DropEntry(u8),
    /// An inode's record dropped (its entries dangle).
    DropInode(Value),
    /// An inode's link count.
    Nlink(Value, Value),
    /// A directory's parent (its `..`).
    DirParent(Value, Value),
    /// The image's end marker moved to another record index.
    MoveImageEnd(u8),
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
    /// The index's root block.
    RootBlock,
    /// The generation the root page must carry.
    RootGeneration,
    /// The root's level.
    RootLevel,
    /// First carried frame's block.
    CarryBlock,
    /// First carried frame's length.
    CarryBlocks,
    /// Blocks of the carried chain.
    CarryTotal,
    /// A half of the names' hash key.
    HashKey(bool),
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
    /// A carried frame's header and payload, by index.
    CkptFrame(u8),
    /// A page of the index, by walk order.
    TreePage(u8),
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
    /// A carried frame's header.
    CkptHeader(u8, HeaderField),
    /// The carried records.
    CkptRecords(RecEdit),
    /// The carried records written again as a chain of equal frames from
    /// a block, the newest superblock pointing at it.
    CkptMove(Value, u8),
    /// The namespace the index holds (the tree built again).
    Tree(TreeEdit),
    /// The records the index holds (the tree built again from their
    /// items, whatever their fields say).
    TreeRecords(RecEdit),
    /// One page of the index, with a valid checksum.
    Page(u8, PageEdit),
    /// The index built again from a block on (over anything there), the
    /// newest superblock pointing at it.
    TreeMove(Value),
}

/// A change to one page of the index (its checksum made valid after).
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum PageEdit {
    /// A header field: 0 magic, 1 level, 2 entries, 3 bytes used, 4 uuid,
    /// 5 generation, 6 own block (by the index mod 7).
    Field(u8, Value),
    /// One byte of the page.
    Byte(u16, u8),
    /// Another page's bytes, as they are (a good page in the wrong place).
    Other(u8),
}

fn pick<T>(v: &mut [T], i: u8) -> Option<&mut T> {
    let n = v.len();
    (n > 0).then(|| &mut v[usize::from(i) % n])
}

fn text(cx: &Cx, t: &mut Text, e: TextEdit, limit: usize) {
    match e {
        TextEdit::Len(v) => t.len = cx.resolve(v, u64::from(t.len), limit as u64) as u16,
        TextEdit::Byte(i, b) => {
            if let Some(x) = pick(&mut t.bytes, i) {
                *x = b;
            }
        }
        TextEdit::Length(n) => {
            let mut bytes = t.bytes.clone();
            bytes.resize(usize::from(n) % (2 * limit + 2), b'n');
            *t = Text::new(bytes);
        }
        TextEdit::Pick(seed) => *t = Text::new(cx.name(seed)),
    }
}

fn field(cx: &Cx, r: &mut Rec, f: Field) {
    let u32v = |v, cur: u32, lim: u64| cx.resolve(v, u64::from(cur), lim) as u32;
    match f {
        Field::Tag(t) => r.tag = t,
        Field::Ino(v) => r.ino = cx.resolve(v, r.ino, MAX_INODE),
        Field::Parent(v) => r.parent = cx.resolve(v, r.parent, MAX_INODE),
        Field::To(v) => r.to = cx.resolve(v, r.to, MAX_INODE),
        Field::Flags(b) => r.flags = b,
        Field::Kind(k) => r.kind = k,
        Field::Perm(v) => r.perm = cx.resolve(v, u64::from(r.perm), 0o7777) as u16,
        Field::Owner(true, v) => r.uid = u32v(v, r.uid, u64::from(u32::MAX)),
        Field::Owner(false, v) => r.gid = u32v(v, r.gid, u64::from(u32::MAX)),
        Field::Nlink(v) => r.nlink = u32v(v, r.nlink, u64::from(MAX_LINKS)),
        Field::Size(v) => r.size = cx.resolve(v, r.size, MAX_FILE_SIZE),
        Field::Time(i, v) => {
            let t = &mut r.times[usize::from(i) % 3];
            *t = cx.resolve(v, *t, i64::MAX as u64);
        }
        Field::Text(Which::Name, e) => text(cx, &mut r.name, e, MAX_NAME_LEN),
        Field::Text(Which::ToName, e) => text(cx, &mut r.to_name, e, MAX_NAME_LEN),
        Field::Text(Which::Target, e) => text(cx, &mut r.target, e, MAX_SYMLINK_LEN),
        Field::Count(v) => r.count = u32v(v, r.count, r.extents.len() as u64),
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

/// A kind code: mostly a valid one, sometimes one past them.
fn kind_code(k: u8) -> u8 {
    match k {
        0..=239 => [KIND_FILE, KIND_DIR, KIND_SYMLINK][usize::from(k % 3)],
        _ => k - 240,
    }
}

fn named(tag: u8, parent: u64, name: Vec<u8>) -> Rec {
    Rec {
        tag,
        parent,
        name: Text::new(name),
        ..Rec::default()
    }
}

fn new_rec(cx: &Cx, n: &NewRec) -> Vec<Rec> {
    let fresh = cx.fresh_ino();
    let ino = |v| cx.resolve(v, fresh, MAX_INODE);
    let dir = |v| cx.resolve(v, super::base::ROOT, MAX_INODE);
    let one = |r| vec![r];
    match n {
        NewRec::Inode(v, kind, nlink, parent, size, extents) => {
            let mut r = Rec {
                tag: TAG_INODE,
                ino: ino(*v),
                kind: kind_code(*kind),
                perm: 0o644,
                times: [1, 2, 3],
                ..Rec::default()
            };
            r.nlink = cx.resolve(*nlink, 0, u64::from(MAX_LINKS)) as u32;
            let parent_now = if r.kind == KIND_DIR {
                super::base::ROOT
            } else {
                0
            };
            r.parent = cx.resolve(*parent, parent_now, MAX_INODE);
            for (i, &(f, d, l)) in extents.iter().take(MAX_LIST).enumerate() {
                let i = i as u64;
                r.extents.push([
                    cx.resolve(f, i, MAX_FILE_PAGES),
                    cx.resolve(d, free_block(cx, i), cx.layout.blocks),
                    cx.resolve(l, 1, MAX_FILE_PAGES),
                ]);
            }
            r.count = r.extents.len() as u32;
            if r.kind == KIND_SYMLINK {
                r.target = Text::new(b"t".to_vec());
            }
            let natural = match r.kind {
                KIND_FILE => r.extents.len() as u64 * PAGE_SIZE as u64,
                KIND_SYMLINK => 1,
                _ => 0,
            };
            r.size = cx.resolve(*size, natural, MAX_FILE_SIZE);
            one(r)
        }
        NewRec::Link(d, v, s) => one(Rec {
            ino: ino(*v),
            ..named(TAG_LINK, dir(*d), cx.name(*s))
        }),
        NewRec::Unlink(d, s) => one(named(TAG_UNLINK, dir(*d), cx.name(*s))),
        NewRec::Rename(d, s, t, ts, flags) => one(Rec {
            to: dir(*t),
            to_name: Text::new(cx.name(*ts)),
            flags: *flags,
            ..named(TAG_RENAME, dir(*d), cx.name(*s))
        }),
        NewRec::Free(v) => one(Rec {
            tag: TAG_FREE,
            ino: ino(*v),
            ..Rec::default()
        }),
        NewRec::ImageEnd => one(Rec {
            tag: TAG_IMAGE_END,
            ..Rec::default()
        }),
        NewRec::UnlinkEntry(i) => cx
            .entry(*i)
            .map(|e| named(TAG_UNLINK, e.parent, e.name.clone()))
            .into_iter()
            .collect(),
        NewRec::MoveEntry(i, d, s, flags) => cx
            .entry(*i)
            .map(|e| Rec {
                to: dir(*d),
                to_name: Text::new(cx.name(*s)),
                flags: *flags,
                ..named(TAG_RENAME, e.parent, e.name.clone())
            })
            .into_iter()
            .collect(),
        NewRec::LinkAgain(i, d, s) => cx
            .entry(*i)
            .map(|e| Rec {
                ino: e.ino,
                ..named(TAG_LINK, dir(*d), cx.name(*s))
            })
            .into_iter()
            .collect(),
        NewRec::FreeEntry(i) => cx
            .entry(*i)
            .map(|e| Rec {
                tag: TAG_FREE,
                ino: e.ino,
                ..Rec::default()
            })
            .into_iter()
            .collect(),
        NewRec::Xattr(v, name, op, len) => {
            let set = op % 2 == 1;
            one(Rec {
                tag: TAG_XATTR,
                ino: cx.resolve(
                    *v,
                    cx.entry(*name).map_or(super::base::ROOT, |e| e.ino),
                    MAX_INODE,
                ),
                name: Text::new(xattr_name(*name)),
                flags: u8::from(set),
                bytes: if set {
                    pattern_bytes(*name, xattr_len(*len))
                } else {
                    Vec::new()
                },
                ..Rec::default()
            })
        }
    }
}

/// `len` bytes that differ from one name to the next.
fn pattern_bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

fn rec_edit(cx: &Cx, p: &mut Payload, e: &RecEdit) {
    let n = p.recs.len();
    let at = |i: u8| usize::from(i) % n.max(1);
    match e {
        RecEdit::Field(i, f) => {
            if let Some(r) = pick(&mut p.recs, *i) {
                field(cx, r, *f);
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
            let at = usize::from(*i) % (n + 1);
            let new = new_rec(cx, r);
            p.recs.splice(at..at, new);
        }
        RecEdit::Cut(k) => p.cut = Some(usize::from(*k)),
        RecEdit::Junk(b) => p.junk.extend(b.iter().take(64)),
        _ => {}
    }
}

/// The index of the `i`th record (mod their number) that `keep` takes.
fn nth_rec(recs: &[Rec], i: u8, keep: impl Fn(&Rec) -> bool) -> Option<usize> {
    let found: Vec<usize> = (0..recs.len()).filter(|&k| keep(&recs[k])).collect();
    found.get(usize::from(i) % found.len().max(1)).copied()
}

/// The image's record of inode `ino`.
fn inode_rec(recs: &mut [Rec], ino: u64) -> Option<&mut Rec> {
    recs.iter_mut().find(|r| r.tag == TAG_INODE && r.ino == ino)
}

fn tree_edit(cx: &Cx, recs: &mut Vec<Rec>, e: TreeEdit) {
    let any_ino = |v| cx.resolve(v, super::base::ROOT, MAX_INODE);
    let link = |recs: &[Rec], i| nth_rec(recs, i, |r| r.tag == TAG_LINK);
    match e {
        TreeEdit::Retarget(i, v) => {
            if let Some(k) = link(recs, i) {
                recs[k].ino = cx.resolve(v, recs[k].ino, MAX_INODE);
            }
        }
        TreeEdit::Reparent(i, v) => {
            if let Some(k) = link(recs, i) {
                recs[k].parent = cx.resolve(v, recs[k].parent, MAX_INODE);
            }
        }
        TreeEdit::SecondEntry(i, v, s) => {
            if let Some(k) = link(recs, i) {
                let mut r = recs[k].clone();
                r.parent = cx.resolve(v, r.parent, MAX_INODE);
                r.name = Text::new(cx.name(s));
                recs.insert(k + 1, r);
            }
        }
        TreeEdit::DropEntry(i) => {
            if let Some(k) = link(recs, i) {
                recs.remove(k);
            }
        }
        TreeEdit::DropInode(v) => {
            let ino = any_ino(v);
            recs.retain(|r| !(r.tag == TAG_INODE && r.ino == ino));
        }
        TreeEdit::Nlink(v, n) => {
            if let Some(r) = inode_rec(recs, any_ino(v)) {
                r.nlink = cx.resolve(n, u64::from(r.nlink), u64::from(MAX_LINKS)) as u32;
            }
        }
        TreeEdit::DirParent(v, p) => {
            if let Some(r) = inode_rec(recs, any_ino(v)) {
                r.parent = cx.resolve(p, r.parent, MAX_INODE);
            }
        }
        TreeEdit::MoveImageEnd(i) => {
            if let Some(k) = recs.iter().position(|r| r.tag == TAG_IMAGE_END) {
                let end = recs.remove(k);
                let at = usize::from(i) % (recs.len() + 1);
                recs.insert(at, end);
            }
        }
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
                    .extend(recs.iter().take(MAX_LIST).flat_map(|r| new_rec(&cx, r)));
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
            Mutation::Tree(e) => {
                tree_edit(&cx, &mut m.tree.recs, *e);
                if m.tree.rebuild(None) {
                    m.point_at_tree();
                }
            }
            Mutation::TreeRecords(e) => {
                let mut p = Payload {
                    recs: core::mem::take(&mut m.tree.recs),
                    ..Payload::default()
                };
                rec_edit(&cx, &mut p, e);
                m.tree.recs = p.recs;
                if m.tree.rebuild(None) {
                    m.point_at_tree();
                }
            }
            Mutation::Page(i, e) => page_edit(&cx, &mut m.tree, *i, *e),
            Mutation::TreeMove(v) => {
                let at = cx.resolve(*v, free_block(&cx, 15), cx.layout.blocks);
                let blocks: Vec<u64> = (0..64).map(|i| at.wrapping_add(i)).collect();
                if m.tree.rebuild(Some(blocks)) {
                    m.point_at_tree();
                }
            }
        }
    }
}

/// Byte offset and width of header field `which` (mod 7) of a page, and
/// the value it has to be to pass.
fn page_field(tree: &TreeModel, page: &[u8], which: u8) -> (usize, usize, u64) {
    let cur = |at: usize, w: usize| {
        let mut b = [0u8; 8];
        b[..w].copy_from_slice(&page[at..at + w]);
        u64::from_le_bytes(b)
    };
    match which % 7 {
        0 => (0, 4, cur(0, 4)),
        1 => (4, 1, cur(4, 1)),
        2 => (6, 2, cur(6, 2)),
        3 => (8, 2, cur(8, 2)),
        4 => (16, 8, tree.uuid),
        5 => (24, 8, tree.root.generation),
        _ => (32, 8, cur(32, 8)),
    }
}

fn page_edit(cx: &Cx, tree: &mut TreeModel, i: u8, e: PageEdit) {
    let n = tree.pages.len();
    if n == 0 {
        return;
    }
    let k = usize::from(i) % n;
    match e {
        PageEdit::Field(which, v) => {
            let (at, width, limit) = page_field(tree, &tree.pages[k].1, which);
            let page = &mut tree.pages[k].1;
            let mut b = [0u8; 8];
            b[..width].copy_from_slice(&page[at..at + width]);
            let new = cx.resolve(v, u64::from_le_bytes(b), limit);
            page[at..at + width].copy_from_slice(&new.to_le_bytes()[..width]);
            seal(page);
        }
        PageEdit::Byte(at, x) => {
            let page = &mut tree.pages[k].1;
            let at = usize::from(at) % PAGE_SIZE;
            page[at] ^= x.max(1);
            seal(page);
        }
        PageEdit::Other(j) => {
            let other = tree.pages[usize::from(j) % n].1.clone();
            tree.pages[k].1 = other;
        }
    }
    tree.dirty = true;
}
