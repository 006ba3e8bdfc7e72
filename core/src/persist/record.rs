//! Log records: what each says, and their encoding.
//!
//! The log holds namespace records (an entry linked into a directory,
//! unlinked, renamed; an inode freed), extended-attribute records (one
//! name of one inode set or removed) and inode records: an inode's whole
//! attributes and extent list, built from the in-memory inode when it is
//! created or synced (btrfs's fast fsync logs the inode, not the history of
//! changes). Records are written in the order the engine made the changes
//! (an inode record captured after a link carries the link count the link
//! made), so replaying them after a checkpoint rebuilds the tree, every
//! inode's attributes and every extent map; the allocator is rebuilt as
//! "everything in the data area that no extent and no checkpoint frame
//! uses".
//!
//! Small syncs put file data in the log too: a [`Record::Data`] carries
//! one page's bytes and the block they belong in, so a sync costs one log
//! write; the page is written to its block later, off the sync path, and
//! a [`Record::Home`] logged after that write says the block holds the
//! page now. Data that no later record supersedes is *live*: replay
//! collects it, and mount writes it to its blocks before anything else.
//!
//! A checkpoint's stream is an image (every inode, every extended
//! attribute, then every entry, taken as they are), an [`Record::ImageEnd`] marker, the live data, then any
//! records the checkpoint folded in (replayed like the log).
//!
//! Replaying records is [`shadow`](super::shadow)'s (through the
//! namespace [`Tree`](super::tree::Tree)); fsck's checks of what they
//! build are [`problems`](super::problems).
//!
//! Decoding checks every value against the engine's limits (inode numbers,
//! sizes, extent ranges, names, link targets), so nothing read from disk
//! can overflow arithmetic later or describe a file the engine could not
//! hold.

use alloc::string::String;
use alloc::vec::Vec;

use super::format::{Dec, Enc, Short};
use super::xattr as xattr_rules;
use crate::error::{Damage, RecordDamage};
use crate::space::Extent;
use crate::units::{
    BlockNo, MAX_FILE_PAGES, MAX_FILE_SIZE, MAX_INODE, MAX_NAME_LEN, MAX_SYMLINK_LEN, PAGE_SIZE_U64,
};

/// Each record's first byte, saying which record it is (the fuzz crate
/// crafts records with these).
pub mod tag {
    /// [`Record::Inode`](super::Record::Inode).
    pub const INODE: u8 = 1;
    /// [`Record::Link`](super::Record::Link).
    pub const LINK: u8 = 2;
    /// [`Record::Unlink`](super::Record::Unlink).
    pub const UNLINK: u8 = 3;
    /// [`Record::Rename`](super::Record::Rename).
    pub const RENAME: u8 = 4;
    /// [`Record::Free`](super::Record::Free).
    pub const FREE: u8 = 5;
    /// [`Record::ImageEnd`](super::Record::ImageEnd).
    pub const IMAGE_END: u8 = 6;
    /// [`Record::Data`](super::Record::Data).
    pub const DATA: u8 = 7;
    /// [`Record::Home`](super::Record::Home).
    pub const HOME: u8 = 8;
    /// [`Record::Xattr`](super::Record::Xattr).
    pub const XATTR: u8 = 9;
}
use tag::{
    DATA as TAG_DATA, FREE as TAG_FREE, HOME as TAG_HOME, IMAGE_END as TAG_IMAGE_END,
    INODE as TAG_INODE, LINK as TAG_LINK, RENAME as TAG_RENAME, UNLINK as TAG_UNLINK,
    XATTR as TAG_XATTR,
};

/// Bytes of an encoded data record: tag, inode, page, block, the page.
pub const DATA_RECORD_LEN: u64 = 1 + 8 + 8 + 8 + PAGE_SIZE_U64;

/// Bytes of an encoded extent.
const EXTENT_LEN: u64 = 24;
/// Bytes of an inode record before its extents or link target.
const INODE_HEAD: u64 = 1 + 8 + 1 + 2 + 4 + 4 + 4 + 8 + 8 + 8 + 8 + 8;

/// What an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A named pipe (FIFO): no data of its own; the kernel joins its
    /// readers and writers.
    Fifo,
    /// A Unix domain socket's name.
    Socket,
    /// A character device node: its device number is in
    /// [`InodeMeta::rdev`]. A mount opens no device through it (`nodev`).
    CharDev,
    /// A block device node, as [`Kind::CharDev`].
    BlockDev,
}

impl Kind {
    /// The kind's byte in an inode record.
    pub const fn code(self) -> u8 {
        match self {
            Kind::File => 1,
            Kind::Dir => 2,
            Kind::Symlink => 3,
            Kind::Fifo => 4,
            Kind::Socket => 5,
            Kind::CharDev => 6,
            Kind::BlockDev => 7,
        }
    }
    /// The kind a record's byte names.
    pub fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            1 => Kind::File,
            2 => Kind::Dir,
            3 => Kind::Symlink,
            4 => Kind::Fifo,
            5 => Kind::Socket,
            6 => Kind::CharDev,
            7 => Kind::BlockDev,
            _ => return None,
        })
    }

    /// A device node: its record carries a device number.
    pub const fn is_device(self) -> bool {
        matches!(self, Kind::CharDev | Kind::BlockDev)
    }

    /// A FIFO, socket or device node: a leaf with no data and no target.
    pub const fn is_special(self) -> bool {
        matches!(
            self,
            Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev
        )
    }
}

/// An inode as a record carries it (and the durable view keeps it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InodeMeta {
    /// File, directory or symbolic link.
    pub kind: Kind,
    /// Permission bits (`mode & 0o7777`).
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Links: entries naming it (a directory: its entry, `.`, and each
    /// subdirectory's `..`).
    pub nlink: u32,
    /// A directory's parent (0 for anything else; the root is its own).
    pub parent: u64,
    /// Size in bytes (a symbolic link: its target's length).
    pub size: u64,
    /// Last access, modification and change times, in nanoseconds since
    /// the Unix epoch (two's complement: a time before 1970 is an `i64`
    /// below zero, kept as its bits).
    pub atime: u64,
    /// Modification time.
    pub mtime: u64,
    /// Change time.
    pub ctime: u64,
    /// A file's mapped runs, in file order.
    pub extents: Vec<Extent>,
    /// A symbolic link's target.
    pub target: String,
    /// A device node's device number (Linux's `dev_t` encoding, as
    /// `makedev(3)` builds it); 0 for anything else.
    pub rdev: u64,
}

impl InodeMeta {
    /// An inode of `kind` with nothing in it and no links.
    pub fn new(kind: Kind, perm: u16, uid: u32, gid: u32, now: u64) -> InodeMeta {
        InodeMeta {
            kind,
            perm,
            uid,
            gid,
            nlink: 0,
            parent: 0,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            extents: Vec::new(),
            target: String::new(),
            rdev: 0,
        }
    }

    /// Bytes of its record.
    pub fn record_len(&self) -> u64 {
        inode_record_len(self.kind, self.extents.len(), self.target.len())
    }
}

/// Bytes of the record of an inode of `kind` with `extents` extents (a
/// file) or a `target_len`-byte target (a symbolic link); a device node's
/// carries its device number.
pub fn inode_record_len(kind: Kind, extents: usize, target_len: usize) -> u64 {
    INODE_HEAD
        + match kind {
            Kind::File => 4 + EXTENT_LEN * extents as u64,
            Kind::Symlink => 2 + target_len as u64,
            Kind::CharDev | Kind::BlockDev => 8,
            Kind::Dir | Kind::Fifo | Kind::Socket => 0,
        }
}

/// Bytes of the record of an entry with a `name_len`-byte name (a link:
/// tag, parent, inode, name); a checkpoint image holds one per entry.
pub fn link_len(name_len: usize) -> u64 {
    1 + 8 + 8 + 2 + name_len as u64
}

/// Bytes of the record that sets (`value`) or removes (`None`) one
/// extended attribute: tag, inode, name, operation, value; a checkpoint
/// image holds one setting per attribute.
pub fn xattr_len(name: &str, value: Option<&[u8]>) -> u64 {
    1 + 8 + 2 + name.len() as u64 + 1 + value.map_or(0, |v| 4 + v.len() as u64)
}

/// One log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// Inode `ino` has these attributes and this map (it exists from now
    /// on, if it did not).
    Inode {
        /// The inode.
        ino: u64,
        /// Its state.
        meta: InodeMeta,
    },
    /// Directory `parent` has an entry `name` for `ino`.
    Link {
        /// The directory.
        parent: u64,
        /// The entry's name.
        name: String,
        /// The inode it names.
        ino: u64,
    },
    /// The entry `name` of `parent` is gone.
    Unlink {
        /// The directory.
        parent: u64,
        /// The entry's name.
        name: String,
    },
    /// An entry moved, replacing any entry at the destination; or, with
    /// `exchange`, two entries swapped.
    Rename {
        /// Source directory.
        from: u64,
        /// Source name.
        from_name: String,
        /// Destination directory.
        to: u64,
        /// Destination name.
        to_name: String,
        /// Swap the two entries (`RENAME_EXCHANGE`).
        exchange: bool,
    },
    /// Inode `ino` is gone: no entry names it and no handle has it open.
    Free {
        /// The inode.
        ino: u64,
    },
    /// Ends a checkpoint's image: what follows is replayed like the log.
    ImageEnd,
    /// Page `page` of file `ino`, mapped to device block `block`, holds
    /// `bytes` (4 KiB), whatever the block holds.
    Data {
        /// The file.
        ino: u64,
        /// The page (file block) index.
        page: u64,
        /// The device block the page maps to.
        block: u64,
        /// The page's bytes.
        bytes: Vec<u8>,
    },
    /// The page's block holds its bytes now: earlier data records for it
    /// are superseded.
    Home {
        /// The file.
        ino: u64,
        /// The page index.
        page: u64,
    },
    /// Inode `ino`'s extended attribute `name` is `value` from now on, or
    /// (`None`) is gone.
    Xattr {
        /// The inode.
        ino: u64,
        /// The attribute's name, namespace prefix included.
        name: String,
        /// Its value, or `None`: removed.
        value: Option<Vec<u8>>,
    },
}

fn short(_: Short) -> Damage {
    Damage::Record(RecordDamage::Truncated)
}

fn ino(d: &mut Dec<'_>) -> Result<u64, Damage> {
    let ino = d.u64().map_err(short)?;
    if ino == 0 || ino > MAX_INODE {
        return Err(Damage::Record(RecordDamage::InodeNumber(ino)));
    }
    Ok(ino)
}

fn page(d: &mut Dec<'_>, ino: u64) -> Result<u64, Damage> {
    let page = d.u64().map_err(short)?;
    if page >= MAX_FILE_PAGES {
        return Err(Damage::Record(RecordDamage::PageIndex { ino, page }));
    }
    Ok(page)
}

fn name(d: &mut Dec<'_>) -> Result<String, Damage> {
    let len = d.u16().map_err(short)?;
    if len == 0 || usize::from(len) > MAX_NAME_LEN {
        return Err(Damage::Record(RecordDamage::NameLength(len)));
    }
    let s = core::str::from_utf8(d.bytes(usize::from(len)).map_err(short)?)
        .map_err(|_| Damage::Record(RecordDamage::NameBytes))?;
    if s.bytes().any(|b| b == 0 || b == b'/') || s == "." || s == ".." {
        return Err(Damage::Record(RecordDamage::NameBytes));
    }
    Ok(String::from(s))
}

fn xattr(d: &mut Dec<'_>, ino: u64) -> Result<Record, Damage> {
    let bad = Damage::Record(RecordDamage::Xattr { ino });
    let len = d.u16().map_err(short)?;
    let name = core::str::from_utf8(d.bytes(usize::from(len)).map_err(short)?).map_err(|_| bad)?;
    xattr_rules::check_name(name).map_err(|_| bad)?;
    let value = match d.u8().map_err(short)? {
        0 => None,
        1 => {
            let len = d.u32().map_err(short)? as usize;
            if len > xattr_rules::VALUE_MAX {
                return Err(bad);
            }
            Some(d.bytes(len).map_err(short)?.to_vec())
        }
        _ => return Err(bad),
    };
    Ok(Record::Xattr {
        ino,
        name: String::from(name),
        value,
    })
}

fn put_name(e: &mut Enc, name: &str) {
    e.u16(name.len() as u16);
    e.bytes(name.as_bytes());
}

fn extents(d: &mut Dec<'_>, ino: u64) -> Result<Vec<Extent>, Damage> {
    let count = d.u32().map_err(short)?;
    let n = count as usize;
    if n > d.remaining() / EXTENT_LEN as usize {
        return Err(Damage::Record(RecordDamage::ExtentCount { ino, count }));
    }
    let mut out = Vec::with_capacity(n);
    let mut next_free = 0;
    for _ in 0..n {
        let file_block = d.u64().map_err(short)?;
        let dev = d.u64().map_err(short)?;
        let len = d.u64().map_err(short)?;
        let file_end = file_block.checked_add(len);
        if len == 0
            || file_end.is_none_or(|end| end > MAX_FILE_PAGES)
            || dev.checked_add(len).is_none()
        {
            return Err(Damage::Record(RecordDamage::ExtentRange {
                ino,
                file_block,
            }));
        }
        if file_block < next_free {
            return Err(Damage::Record(RecordDamage::ExtentOrder {
                ino,
                file_block,
            }));
        }
        next_free = file_block + len;
        out.push(Extent {
            file_block,
            dev: BlockNo(dev),
            len,
        });
    }
    Ok(out)
}

fn inode_meta(d: &mut Dec<'_>, ino: u64) -> Result<InodeMeta, Damage> {
    let code = d.u8().map_err(short)?;
    let kind = Kind::from_code(code).ok_or(Damage::Record(RecordDamage::Kind { ino, code }))?;
    let perm = d.u16().map_err(short)?;
    if perm & !0o7777 != 0 {
        return Err(Damage::Record(RecordDamage::Perm { ino, perm }));
    }
    let mut m = InodeMeta {
        kind,
        perm,
        uid: d.u32().map_err(short)?,
        gid: d.u32().map_err(short)?,
        nlink: d.u32().map_err(short)?,
        parent: d.u64().map_err(short)?,
        size: d.u64().map_err(short)?,
        atime: d.u64().map_err(short)?,
        mtime: d.u64().map_err(short)?,
        ctime: d.u64().map_err(short)?,
        extents: Vec::new(),
        target: String::new(),
        rdev: 0,
    };
    if m.parent > MAX_INODE || (kind != Kind::Dir && m.parent != 0) {
        return Err(Damage::Record(RecordDamage::Parent {
            ino,
            parent: m.parent,
        }));
    }
    let bad_size = Damage::Record(RecordDamage::Size { ino, size: m.size });
    if m.size > MAX_FILE_SIZE {
        return Err(bad_size);
    }
    match kind {
        Kind::File => m.extents = extents(d, ino)?,
        Kind::Symlink => {
            let bad_target = Damage::Record(RecordDamage::Target { ino });
            let len = d.u16().map_err(short)? as usize;
            if len == 0 || len > MAX_SYMLINK_LEN {
                return Err(bad_target);
            }
            m.target = String::from(
                core::str::from_utf8(d.bytes(len).map_err(short)?).map_err(|_| bad_target)?,
            );
            if m.target.bytes().any(|b| b == 0) || m.size != len as u64 {
                return Err(bad_target);
            }
        }
        Kind::Dir | Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev => {
            if m.size != 0 {
                return Err(bad_size);
            }
            if kind.is_device() {
                m.rdev = d.u64().map_err(short)?;
            }
        }
    }
    Ok(m)
}

impl Record {
    /// Bytes [`Record::encode`] appends, without encoding.
    pub fn encoded_len(&self) -> u64 {
        match self {
            Record::Inode { meta, .. } => {
                inode_record_len(meta.kind, meta.extents.len(), meta.target.len())
            }
            Record::Link { name, .. } => link_len(name.len()),
            Record::Unlink { name, .. } => 1 + 8 + 2 + name.len() as u64,
            Record::Rename {
                from_name, to_name, ..
            } => 1 + 2 * (8 + 2) + (from_name.len() + to_name.len()) as u64 + 1,
            Record::Free { .. } => 1 + 8,
            Record::ImageEnd => 1,
            Record::Data { bytes, .. } => 1 + 3 * 8 + bytes.len() as u64,
            Record::Home { .. } => 1 + 2 * 8,
            Record::Xattr { name, value, .. } => xattr_len(name, value.as_deref()),
        }
    }

    /// Appends the encoding.
    pub fn encode(&self, e: &mut Enc) {
        match self {
            Record::Inode { ino, meta } => encode_inode(e, *ino, meta),
            Record::Link { parent, name, ino } => {
                e.u8(TAG_LINK);
                e.u64(*parent);
                e.u64(*ino);
                put_name(e, name);
            }
            Record::Unlink { parent, name } => {
                e.u8(TAG_UNLINK);
                e.u64(*parent);
                put_name(e, name);
            }
            Record::Rename {
                from,
                from_name,
                to,
                to_name,
                exchange,
            } => {
                e.u8(TAG_RENAME);
                e.u64(*from);
                put_name(e, from_name);
                e.u64(*to);
                put_name(e, to_name);
                e.u8(u8::from(*exchange));
            }
            Record::Free { ino } => {
                e.u8(TAG_FREE);
                e.u64(*ino);
            }
            Record::ImageEnd => e.u8(TAG_IMAGE_END),
            Record::Data {
                ino,
                page,
                block,
                bytes,
            } => encode_data(e, *ino, *page, *block, bytes),
            Record::Home { ino, page } => {
                e.u8(TAG_HOME);
                e.u64(*ino);
                e.u64(*page);
            }
            Record::Xattr { ino, name, value } => {
                e.u8(TAG_XATTR);
                e.u64(*ino);
                put_name(e, name);
                match value {
                    None => e.u8(0),
                    Some(v) => {
                        e.u8(1);
                        e.u32(v.len() as u32);
                        e.bytes(v);
                    }
                }
            }
        }
    }

    /// Decodes one record, checking every value.
    pub fn decode(d: &mut Dec<'_>) -> Result<Record, Damage> {
        Ok(match d.u8().map_err(short)? {
            TAG_INODE => {
                let ino = ino(d)?;
                Record::Inode {
                    ino,
                    meta: inode_meta(d, ino)?,
                }
            }
            TAG_LINK => {
                let parent = ino(d)?;
                let child = ino(d)?;
                Record::Link {
                    parent,
                    ino: child,
                    name: name(d)?,
                }
            }
            TAG_UNLINK => Record::Unlink {
                parent: ino(d)?,
                name: name(d)?,
            },
            TAG_RENAME => Record::Rename {
                from: ino(d)?,
                from_name: name(d)?,
                to: ino(d)?,
                to_name: name(d)?,
                exchange: match d.u8().map_err(short)? {
                    0 => false,
                    1 => true,
                    x => return Err(Damage::Record(RecordDamage::RenameFlags(x))),
                },
            },
            TAG_FREE => Record::Free { ino: ino(d)? },
            TAG_IMAGE_END => Record::ImageEnd,
            TAG_DATA => {
                let ino = ino(d)?;
                Record::Data {
                    ino,
                    page: page(d, ino)?,
                    block: d.u64().map_err(short)?,
                    bytes: d.bytes(PAGE_SIZE_U64 as usize).map_err(short)?.to_vec(),
                }
            }
            TAG_HOME => {
                let ino = ino(d)?;
                Record::Home {
                    ino,
                    page: page(d, ino)?,
                }
            }
            TAG_XATTR => {
                let ino = ino(d)?;
                xattr(d, ino)?
            }
            tag => return Err(Damage::Record(RecordDamage::Tag(tag))),
        })
    }

    /// Decodes a whole payload.
    pub fn decode_all(payload: &[u8]) -> Result<Vec<Record>, Damage> {
        let mut d = Dec::new(payload);
        let mut out = Vec::new();
        while d.remaining() > 0 {
            out.push(Record::decode(&mut d)?);
        }
        Ok(out)
    }

    /// Encodes a list of records.
    pub fn encode_all(records: &[Record]) -> Vec<u8> {
        let mut e = Enc::default();
        for r in records {
            r.encode(&mut e);
        }
        e.0
    }
}

/// Encodes a [`Record::Data`] from borrowed bytes (a checkpoint encodes
/// the durable view's shared pages without copying them into records).
pub(crate) fn encode_data(e: &mut Enc, ino: u64, page: u64, block: u64, bytes: &[u8]) {
    e.u8(TAG_DATA);
    e.u64(ino);
    e.u64(page);
    e.u64(block);
    e.bytes(bytes);
}

pub(crate) fn encode_inode(e: &mut Enc, ino: u64, m: &InodeMeta) {
    e.u8(TAG_INODE);
    e.u64(ino);
    e.u8(m.kind.code());
    e.u16(m.perm);
    e.u32(m.uid);
    e.u32(m.gid);
    e.u32(m.nlink);
    e.u64(m.parent);
    e.u64(m.size);
    e.u64(m.atime);
    e.u64(m.mtime);
    e.u64(m.ctime);
    match m.kind {
        Kind::File => {
            e.u32(m.extents.len() as u32);
            for x in &m.extents {
                e.u64(x.file_block);
                e.u64(x.dev.0);
                e.u64(x.len);
            }
        }
        Kind::Symlink => put_name(e, &m.target),
        Kind::CharDev | Kind::BlockDev => e.u64(m.rdev),
        Kind::Dir | Kind::Fifo | Kind::Socket => {}
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn ext(fb: u64, dev: u64, len: u64) -> Extent {
        Extent {
            file_block: fb,
            dev: BlockNo(dev),
            len,
        }
    }

    pub(crate) fn inode(kind: Kind) -> InodeMeta {
        InodeMeta::new(kind, 0o644, 1000, 100, 5)
    }

    pub(crate) fn link(parent: u64, name: &str, ino: u64) -> Record {
        Record::Link {
            parent,
            name: name.into(),
            ino,
        }
    }

    pub(crate) fn rename(from: u64, f: &str, to: u64, t: &str, exchange: bool) -> Record {
        Record::Rename {
            from,
            from_name: f.into(),
            to,
            to_name: t.into(),
            exchange,
        }
    }

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let mut file = inode(Kind::File);
        file.size = 8192;
        file.extents = alloc::vec![ext(0, 100, 2)];
        let mut sym = inode(Kind::Symlink);
        sym.target = "../target".into();
        sym.size = 9;
        let mut chr = inode(Kind::CharDev);
        chr.rdev = (1 << 8) | 3;
        let mut blk = inode(Kind::BlockDev);
        blk.rdev = u64::MAX;
        let recs = alloc::vec![
            Record::Inode { ino: 2, meta: file },
            Record::Inode { ino: 5, meta: chr },
            Record::Inode { ino: 6, meta: blk },
            Record::Inode {
                ino: 7,
                meta: inode(Kind::Fifo)
            },
            Record::Inode {
                ino: 8,
                meta: inode(Kind::Socket)
            },
            Record::Inode { ino: 3, meta: sym },
            Record::Inode {
                ino: 4,
                meta: inode(Kind::Dir)
            },
            link(1, "a", 2),
            Record::Unlink {
                parent: 1,
                name: "a".into()
            },
            rename(1, "a", 4, "b", true),
            Record::Xattr {
                ino: 4,
                name: "user.k".into(),
                value: Some(alloc::vec![7; 3]),
            },
            Record::Xattr {
                ino: 4,
                name: "system.posix_acl_default".into(),
                value: None,
            },
            Record::Free { ino: 2 },
            Record::ImageEnd,
        ];
        let bytes = Record::encode_all(&recs);
        assert_eq!(Record::decode_all(&bytes).unwrap(), recs);
        let lens: u64 = recs
            .iter()
            .map(|r| match r {
                Record::Xattr { name, value, .. } => xattr_len(name, value.as_deref()),
                r => Record::encode_all(core::slice::from_ref(r)).len() as u64,
            })
            .sum();
        assert_eq!(lens, bytes.len() as u64);
        let more = [
            Record::Data {
                ino: 2,
                page: 1,
                block: 9,
                bytes: alloc::vec![1u8; 4096],
            },
            Record::Home { ino: 2, page: 1 },
        ];
        for r in recs.iter().chain(&more) {
            let mut e = Enc::default();
            r.encode(&mut e);
            assert_eq!(r.encoded_len(), e.0.len() as u64, "{r:?}");
        }
        assert!(Record::decode_all(&[9]).is_err());
        assert!(Record::decode_all(&[TAG_INODE, 1, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }

    #[test]
    fn values_at_and_past_their_limits() {
        let ok = |ino: u64, m: InodeMeta| {
            Record::decode_all(&Record::encode_all(&[Record::Inode { ino, meta: m }])).is_ok()
        };
        let file = |size, extents| {
            let mut m = inode(Kind::File);
            m.size = size;
            m.extents = extents;
            m
        };
        assert!(ok(MAX_INODE, file(MAX_FILE_SIZE, alloc::vec![])));
        assert!(!ok(MAX_INODE + 1, file(0, alloc::vec![])));
        assert!(!ok(0, file(0, alloc::vec![])));
        assert!(!ok(u64::MAX, file(0, alloc::vec![])));
        assert!(!ok(1, file(MAX_FILE_SIZE + 1, alloc::vec![])));
        assert!(ok(1, file(0, alloc::vec![ext(MAX_FILE_PAGES - 1, 9, 1)])));
        assert!(!ok(1, file(0, alloc::vec![ext(MAX_FILE_PAGES - 1, 9, 2)])));
        assert!(!ok(1, file(0, alloc::vec![ext(0, 9, u64::MAX)])));
        assert!(!ok(1, file(0, alloc::vec![ext(0, u64::MAX, 2)])));
        assert!(!ok(1, file(0, alloc::vec![ext(0, 9, 0)])));
        assert!(!ok(1, file(0, alloc::vec![ext(4, 9, 2), ext(5, 20, 1)])));
        let mut bad_perm = file(0, alloc::vec![]);
        bad_perm.perm = 0o10000;
        // The cause names the inode and the value.
        let bytes = Record::encode_all(&[Record::Inode {
            ino: 7,
            meta: bad_perm,
        }]);
        assert_eq!(
            Record::decode_all(&bytes),
            Err(Damage::Record(RecordDamage::Perm {
                ino: 7,
                perm: 0o10000
            }))
        );
        let mut sym = inode(Kind::Symlink);
        sym.target = "t".repeat(MAX_SYMLINK_LEN);
        sym.size = MAX_SYMLINK_LEN as u64;
        assert!(ok(1, sym.clone()));
        sym.size = 1;
        assert!(!ok(1, sym));
        for kind in [Kind::Dir, Kind::Fifo, Kind::Socket, Kind::CharDev] {
            let mut leaf = inode(kind);
            leaf.size = 1;
            assert!(!ok(1, leaf), "{kind:?} with a size");
        }
        for code in 1..=7 {
            assert_eq!(Kind::from_code(code).map(Kind::code), Some(code));
        }
        assert_eq!(Kind::from_code(8), None);
        let named = |name: &str| {
            let mut e = Enc::default();
            e.u8(TAG_LINK);
            e.u64(1);
            e.u64(2);
            put_name(&mut e, name);
            Record::decode_all(&e.0).is_ok()
        };
        assert!(named(&"n".repeat(MAX_NAME_LEN)));
        assert!(!named(&"n".repeat(MAX_NAME_LEN + 1)));
        assert!(!named("a/b"));
        assert!(!named(".."));
        assert!(!named(""));
        let xattr = |name: &str, len: usize| {
            Record::decode_all(&Record::encode_all(&[Record::Xattr {
                ino: 3,
                name: name.into(),
                value: Some(alloc::vec![1; len]),
            }]))
        };
        assert!(xattr("user.a", xattr_rules::VALUE_MAX).is_ok());
        let bad = Err(Damage::Record(RecordDamage::Xattr { ino: 3 }));
        assert_eq!(xattr("user.a", xattr_rules::VALUE_MAX + 1), bad);
        assert_eq!(xattr("nowhere.a", 1), bad);
    }
}
