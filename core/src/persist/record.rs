//! Log records and the durable metadata they describe.
//!
//! The log holds namespace records (an entry linked into a directory,
//! unlinked, renamed; an inode freed) and inode records: an inode's whole
//! attributes and extent list, built from the in-memory inode when it is
//! created or synced (btrfs's fast fsync logs the inode, not the history of
//! changes). Records are written in the order the engine made the changes
//! (an inode record captured after a link carries the link count the link
//! made), so replaying them after a checkpoint rebuilds the tree, every
//! inode's attributes and every extent map; the allocator is rebuilt as
//! "everything in the data area that no extent and no checkpoint frame
//! uses".
//!
//! A checkpoint's stream is an image (every inode, then every entry, taken
//! as they are), an [`Record::ImageEnd`] marker, then any records the
//! checkpoint folded in (replayed like the log).
//!
//! Decoding checks every value against the engine's limits (inode numbers,
//! sizes, extent ranges, names, link targets), so nothing read from disk
//! can overflow arithmetic later or describe a file the engine could not
//! hold.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use super::format::{Dec, Enc, Layout, Short};
use crate::error::Damage;
use crate::space::Extent;
use crate::units::{
    BlockNo, MAX_FILE_PAGES, MAX_FILE_SIZE, MAX_INODE, MAX_NAME_LEN, MAX_SYMLINK_LEN,
    PAGE_SIZE_U64, ROOT_INO,
};

const TAG_INODE: u8 = 1;
const TAG_LINK: u8 = 2;
const TAG_UNLINK: u8 = 3;
const TAG_RENAME: u8 = 4;
const TAG_FREE: u8 = 5;
const TAG_IMAGE_END: u8 = 6;

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
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::File => 1,
            Kind::Dir => 2,
            Kind::Symlink => 3,
        }
    }
    fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            1 => Kind::File,
            2 => Kind::Dir,
            3 => Kind::Symlink,
            _ => return None,
        })
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
    /// the Unix epoch.
    pub atime: u64,
    /// Modification time.
    pub mtime: u64,
    /// Change time.
    pub ctime: u64,
    /// A file's mapped runs, in file order.
    pub extents: Vec<Extent>,
    /// A symbolic link's target.
    pub target: String,
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
        }
    }

    /// Bytes of its record.
    pub fn record_len(&self) -> u64 {
        inode_record_len(self.kind, self.extents.len(), self.target.len())
    }
}

/// Bytes of the record of an inode of `kind` with `extents` extents (a
/// file) or a `target_len`-byte target (a symbolic link).
pub fn inode_record_len(kind: Kind, extents: usize, target_len: usize) -> u64 {
    INODE_HEAD
        + match kind {
            Kind::File => 4 + EXTENT_LEN * extents as u64,
            Kind::Symlink => 2 + target_len as u64,
            Kind::Dir => 0,
        }
}

fn link_len(name_len: usize) -> u64 {
    1 + 8 + 8 + 2 + name_len as u64
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
}

fn short(_: Short) -> Damage {
    Damage::Record("truncated")
}

fn ino(d: &mut Dec<'_>) -> Result<u64, Damage> {
    let ino = d.u64().map_err(short)?;
    if ino == 0 || ino > MAX_INODE {
        return Err(Damage::Record("inode number out of range"));
    }
    Ok(ino)
}

fn name(d: &mut Dec<'_>) -> Result<String, Damage> {
    let len = d.u16().map_err(short)? as usize;
    if len == 0 || len > MAX_NAME_LEN {
        return Err(Damage::Record("name length out of range"));
    }
    let s = core::str::from_utf8(d.bytes(len).map_err(short)?)
        .map_err(|_| Damage::Record("name is not UTF-8"))?;
    if s.bytes().any(|b| b == 0 || b == b'/') || s == "." || s == ".." {
        return Err(Damage::Record("name contains NUL or '/', or is . or .."));
    }
    Ok(String::from(s))
}

fn put_name(e: &mut Enc, name: &str) {
    e.u16(name.len() as u16);
    e.bytes(name.as_bytes());
}

fn extents(d: &mut Dec<'_>) -> Result<Vec<Extent>, Damage> {
    let n = d.u32().map_err(short)? as usize;
    if n > d.remaining() / EXTENT_LEN as usize {
        return Err(Damage::Record("extent count past the record's end"));
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
            return Err(Damage::Record("extent out of range"));
        }
        if file_block < next_free {
            return Err(Damage::Record("extents overlap or are out of order"));
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

fn inode_meta(d: &mut Dec<'_>) -> Result<InodeMeta, Damage> {
    let kind =
        Kind::from_code(d.u8().map_err(short)?).ok_or(Damage::Record("unknown inode kind"))?;
    let perm = d.u16().map_err(short)?;
    if perm & !0o7777 != 0 {
        return Err(Damage::Record("permission bits out of range"));
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
    };
    if m.parent > MAX_INODE || (kind != Kind::Dir && m.parent != 0) {
        return Err(Damage::Record("parent out of range"));
    }
    if m.size > MAX_FILE_SIZE {
        return Err(Damage::Record("file size past the largest file"));
    }
    match kind {
        Kind::File => m.extents = extents(d)?,
        Kind::Symlink => {
            let len = d.u16().map_err(short)? as usize;
            if len == 0 || len > MAX_SYMLINK_LEN {
                return Err(Damage::Record("link target length out of range"));
            }
            m.target = String::from(
                core::str::from_utf8(d.bytes(len).map_err(short)?)
                    .map_err(|_| Damage::Record("link target is not UTF-8"))?,
            );
            if m.target.bytes().any(|b| b == 0) || m.size != len as u64 {
                return Err(Damage::Record(
                    "link target holds NUL or mismatches its size",
                ));
            }
        }
        Kind::Dir => {
            if m.size != 0 {
                return Err(Damage::Record("a directory with a size"));
            }
        }
    }
    Ok(m)
}

impl Record {
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
        }
    }

    /// Decodes one record, checking every value.
    pub fn decode(d: &mut Dec<'_>) -> Result<Record, Damage> {
        Ok(match d.u8().map_err(short)? {
            TAG_INODE => Record::Inode {
                ino: ino(d)?,
                meta: inode_meta(d)?,
            },
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
                    _ => return Err(Damage::Record("rename flags out of range")),
                },
            },
            TAG_FREE => Record::Free { ino: ino(d)? },
            TAG_IMAGE_END => Record::ImageEnd,
            _ => return Err(Damage::Record("unknown record type")),
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

fn encode_inode(e: &mut Enc, ino: u64, m: &InodeMeta) {
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
        Kind::Dir => {}
    }
}

/// Who owns a run of blocks, for problem reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Owner {
    /// A file, by inode.
    Inode(u64),
    /// The checkpoint.
    Checkpoint,
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Inode(ino) => write!(f, "inode {ino}"),
            Owner::Checkpoint => write!(f, "the checkpoint"),
        }
    }
}

/// A broken invariant of durable metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// An extent lies outside the data area.
    OutsideData {
        /// The file.
        ino: u64,
        /// Its first device block.
        block: u64,
        /// Its length.
        len: u64,
    },
    /// A file maps blocks past its EOF page.
    PastEof {
        /// The file.
        ino: u64,
        /// The first file block past EOF that is mapped.
        file_block: u64,
        /// The file's size.
        size: u64,
    },
    /// A device block has two owners.
    OwnedTwice {
        /// The block.
        block: u64,
        /// One owner.
        first: Owner,
        /// The other.
        second: Owner,
    },
    /// The root directory is missing or is not a directory.
    NoRoot,
    /// An entry names an inode that does not exist, or sits in something
    /// that is not a directory.
    DanglingEntry {
        /// The directory.
        parent: u64,
        /// The entry.
        name: String,
    },
    /// A directory has more than one entry, or its parent disagrees with
    /// the entry naming it (`..` is wrong).
    BadDirLinks {
        /// The directory.
        ino: u64,
    },
    /// The tree is not connected and acyclic: a directory cannot be reached
    /// from the root.
    Unreachable {
        /// The inode.
        ino: u64,
    },
    /// An inode's link count is not the number of entries naming it.
    LinkCount {
        /// The inode.
        ino: u64,
        /// Its link count.
        recorded: u32,
        /// Links counted from the entries.
        counted: u32,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::OutsideData { ino, block, len } => write!(
                f,
                "inode {ino}: extent at block {block} (+{len}) is outside the data area"
            ),
            Problem::PastEof {
                ino,
                file_block,
                size,
            } => write!(
                f,
                "inode {ino}: file block {file_block} is mapped past EOF ({size} bytes)"
            ),
            Problem::OwnedTwice {
                block,
                first,
                second,
            } => write!(f, "block {block} is owned by {first} and {second}"),
            Problem::NoRoot => write!(f, "the root directory is missing"),
            Problem::DanglingEntry { parent, name } => write!(
                f,
                "entry '{name}' in inode {parent} names no inode, or its parent is no directory"
            ),
            Problem::BadDirLinks { ino } => write!(
                f,
                "directory {ino} has several entries, or its '..' disagrees with its entry"
            ),
            Problem::Unreachable { ino } => write!(
                f,
                "inode {ino} is linked but cannot be reached from the root"
            ),
            Problem::LinkCount {
                ino,
                recorded,
                counted,
            } => write!(
                f,
                "inode {ino} has link count {recorded} but {counted} links"
            ),
        }
    }
}

/// The metadata a crash would leave: the checkpoint plus every durable
/// log record. Kept in memory to write the next checkpoint from (so a
/// checkpoint never references data that is not durable).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shadow {
    /// Inode -> its state.
    pub inodes: BTreeMap<u64, InodeMeta>,
    /// (directory, name) -> inode.
    pub entries: BTreeMap<(u64, String), u64>,
    /// Bytes of this state's checkpoint image.
    image_len: u64,
}

impl Shadow {
    /// An empty filesystem: a root directory owned by `uid`/`gid`.
    pub fn empty(uid: u32, gid: u32, now: u64) -> Shadow {
        let mut root = InodeMeta::new(Kind::Dir, 0o755, uid, gid, now);
        root.nlink = 2;
        root.parent = ROOT_INO;
        let mut s = Shadow::default();
        s.put_inode(ROOT_INO, root);
        s
    }

    fn put_inode(&mut self, ino: u64, meta: InodeMeta) {
        self.image_len += meta.record_len();
        if let Some(old) = self.inodes.insert(ino, meta) {
            self.image_len -= old.record_len();
        }
    }

    fn put_entry(&mut self, parent: u64, name: String, ino: u64) {
        self.image_len += link_len(name.len());
        if let Some(_old) = self.entries.insert((parent, name.clone()), ino) {
            self.image_len -= link_len(name.len());
        }
    }

    fn take_entry(&mut self, parent: u64, name: &str) -> Option<u64> {
        let ino = self.entries.remove(&(parent, String::from(name)))?;
        self.image_len -= link_len(name.len());
        Some(ino)
    }

    fn meta(&mut self, ino: u64) -> Result<&mut InodeMeta, Damage> {
        self.inodes.get_mut(&ino).ok_or(Damage::Replay(
            "a record names an inode that does not exist",
        ))
    }

    fn is_dir(&self, ino: u64) -> bool {
        self.inodes.get(&ino).is_some_and(|m| m.kind == Kind::Dir)
    }

    /// Loads one record of a checkpoint image: taken as it is, with no
    /// link counting (the image's inode records carry their counts).
    pub fn load(&mut self, r: &Record) -> Result<(), Damage> {
        match r {
            Record::Inode { ino, meta } => self.put_inode(*ino, meta.clone()),
            Record::Link { parent, name, ino } => {
                if self.entries.contains_key(&(*parent, name.clone())) {
                    return Err(Damage::Replay("an image names one entry twice"));
                }
                self.put_entry(*parent, name.clone(), *ino);
            }
            _ => return Err(Damage::Replay("an image holds a record images never do")),
        }
        Ok(())
    }

    /// Applies one record, as the engine did when it made the change (link
    /// counts and directory parents follow). A record that makes no sense
    /// against the state (a link over an existing entry, a rename of no
    /// entry) is an error: the image is corrupt.
    pub fn apply(&mut self, r: &Record) -> Result<(), Damage> {
        match r {
            Record::Inode { ino, meta } => self.put_inode(*ino, meta.clone()),
            Record::Link { parent, name, ino } => {
                if !self.is_dir(*parent) || self.entries.contains_key(&(*parent, name.clone())) {
                    return Err(Damage::Replay("a link into no directory, or over an entry"));
                }
                self.link(*parent, name, *ino)?;
            }
            Record::Unlink { parent, name } => {
                let ino = self
                    .take_entry(*parent, name)
                    .ok_or(Damage::Replay("an unlink of no entry"))?;
                self.unlinked(*parent, ino)?;
            }
            Record::Rename {
                from,
                from_name,
                to,
                to_name,
                exchange,
            } => self.rename(*from, from_name, *to, to_name, *exchange)?,
            Record::Free { ino } => {
                if *ino == ROOT_INO || self.inodes.get(ino).is_some_and(|m| m.nlink != 0) {
                    return Err(Damage::Replay("a free of an inode that still has links"));
                }
                if let Some(old) = self.inodes.remove(ino) {
                    self.image_len -= old.record_len();
                }
            }
            Record::ImageEnd => return Err(Damage::Replay("an image end outside an image")),
        }
        Ok(())
    }

    /// Counts a new entry for `ino` in `parent`.
    fn link(&mut self, parent: u64, name: &str, ino: u64) -> Result<(), Damage> {
        let kind = self.meta(ino)?.kind;
        self.put_entry(parent, String::from(name), ino);
        let m = self.meta(ino)?;
        if kind == Kind::Dir {
            // Its entry and its own `.`; the parent gains a `..`.
            m.nlink = m.nlink.saturating_add(2);
            m.parent = parent;
            let p = self.meta(parent)?;
            p.nlink = p.nlink.saturating_add(1);
        } else {
            m.nlink = m.nlink.saturating_add(1);
        }
        Ok(())
    }

    /// Counts an entry of `parent` for `ino` gone.
    fn unlinked(&mut self, parent: u64, ino: u64) -> Result<(), Damage> {
        let m = self.meta(ino)?;
        if m.kind == Kind::Dir {
            m.nlink = 0;
            let p = self.meta(parent)?;
            p.nlink = p.nlink.saturating_sub(1);
        } else {
            m.nlink = m.nlink.saturating_sub(1);
        }
        Ok(())
    }

    fn rename(
        &mut self,
        from: u64,
        from_name: &str,
        to: u64,
        to_name: &str,
        exchange: bool,
    ) -> Result<(), Damage> {
        if !self.is_dir(from) || !self.is_dir(to) {
            return Err(Damage::Replay("a rename between non-directories"));
        }
        let src = *self
            .entries
            .get(&(from, String::from(from_name)))
            .ok_or(Damage::Replay("a rename of no entry"))?;
        if from == to && from_name == to_name {
            return Ok(());
        }
        let dst = self.entries.get(&(to, String::from(to_name))).copied();
        if exchange {
            let dst = dst.ok_or(Damage::Replay("an exchange with no entry"))?;
            self.put_entry(from, String::from(from_name), dst);
            self.put_entry(to, String::from(to_name), src);
            self.moved(src, from, to)?;
            self.moved(dst, to, from)?;
            return Ok(());
        }
        if let Some(old) = dst {
            self.take_entry(to, to_name);
            self.unlinked(to, old)?;
        }
        self.take_entry(from, from_name);
        self.put_entry(to, String::from(to_name), src);
        self.moved(src, from, to)
    }

    /// A directory's `..` moves with it from `from` to `to`.
    fn moved(&mut self, ino: u64, from: u64, to: u64) -> Result<(), Damage> {
        if from == to || !self.is_dir(ino) {
            return Ok(());
        }
        self.meta(ino)?.parent = to;
        let f = self.meta(from)?;
        f.nlink = f.nlink.saturating_sub(1);
        let t = self.meta(to)?;
        t.nlink = t.nlink.saturating_add(1);
        Ok(())
    }

    /// Inodes no entry names and no link keeps: unlinked while open when
    /// the filesystem stopped. Recovery reclaims them.
    pub fn orphans(&self) -> Vec<u64> {
        self.inodes
            .iter()
            .filter(|(&ino, m)| ino != ROOT_INO && m.nlink == 0)
            .map(|(&ino, _)| ino)
            .collect()
    }

    /// Drops an orphan (see [`Shadow::orphans`]).
    pub fn reclaim(&mut self, ino: u64) {
        if let Some(old) = self.inodes.remove(&ino) {
            self.image_len -= old.record_len();
        }
    }

    /// Bytes of this state's checkpoint image ([`Shadow::image`] encoded).
    pub fn image_len(&self) -> u64 {
        self.image_len + 1
    }

    /// This state as a checkpoint image, encoded: every inode, every
    /// entry, and the [`Record::ImageEnd`] marker.
    pub fn image(&self) -> Vec<u8> {
        let mut e = Enc(Vec::with_capacity(self.image_len() as usize));
        for (&ino, m) in &self.inodes {
            encode_inode(&mut e, ino, m);
        }
        for ((parent, name), &ino) in &self.entries {
            Record::Link {
                parent: *parent,
                name: name.clone(),
                ino,
            }
            .encode(&mut e);
        }
        Record::ImageEnd.encode(&mut e);
        debug_assert_eq!(e.0.len() as u64, self.image_len());
        e.0
    }

    /// Drops the extents of `ino` that `keep` refuses (for repair).
    pub fn retain_extents(&mut self, ino: u64, mut keep: impl FnMut(&Extent) -> bool) {
        if let Some(m) = self.inodes.get_mut(&ino) {
            self.image_len -= m.record_len();
            m.extents.retain(|x| keep(x));
            self.image_len += m.record_len();
        }
    }

    /// Removes the entry `(parent, name)` as it is, counting nothing (for
    /// repair).
    pub fn drop_entry(&mut self, parent: u64, name: &str) {
        self.take_entry(parent, name);
    }

    /// Replaces whatever inode 1 is with an empty root directory (for
    /// repair of an image that has no root).
    pub fn make_root(&mut self) {
        let mut root = InodeMeta::new(Kind::Dir, 0o755, 0, 0, 0);
        root.nlink = 2;
        root.parent = ROOT_INO;
        self.put_inode(ROOT_INO, root);
    }

    /// Sets directory `ino`'s `..` (for repair).
    pub fn set_parent(&mut self, ino: u64, parent: u64) {
        if let Some(m) = self.inodes.get_mut(&ino) {
            m.parent = parent;
        }
    }

    /// Sets `ino`'s link count (for repair).
    pub fn set_nlink(&mut self, ino: u64, nlink: u32) {
        if let Some(m) = self.inodes.get_mut(&ino) {
            m.nlink = nlink;
        }
    }

    /// Links `ino` into the root as `#<ino>` (fsck's lost+found), making a
    /// directory's `..` the root; counts nothing (for repair).
    pub fn attach_to_root(&mut self, ino: u64) {
        let name = alloc::format!("#{ino}");
        if let Some(m) = self.inodes.get_mut(&ino) {
            if m.kind == Kind::Dir {
                m.parent = ROOT_INO;
            }
        }
        self.put_entry(ROOT_INO, name, ino);
    }

    /// Every file with its path, for reports: `ino -> "/a/b"` (the first
    /// path found for a file with several links).
    pub fn paths(&self) -> BTreeMap<u64, String> {
        let mut out = BTreeMap::new();
        out.insert(ROOT_INO, String::from("/"));
        let mut todo = alloc::vec![(ROOT_INO, String::new())];
        let mut seen = BTreeSet::new();
        while let Some((dir, path)) = todo.pop() {
            if !seen.insert(dir) {
                continue;
            }
            for ((_, name), &ino) in self
                .entries
                .range((dir, String::new())..)
                .take_while(|((p, _), _)| *p == dir)
            {
                let p = alloc::format!("{path}/{name}");
                out.entry(ino).or_insert_with(|| p.clone());
                if self.is_dir(ino) {
                    todo.push((ino, p));
                }
            }
        }
        out
    }

    /// Every problem with this state on `layout`, given the checkpoint
    /// chain's blocks: extents outside the data area or past EOF, blocks
    /// owned twice, and the tree's invariants (a root; every entry names an
    /// inode in a directory; one entry per directory, matching its `..`;
    /// everything linked reachable from the root, with no cycle; link
    /// counts equal to the links counted).
    pub fn problems(&self, layout: &Layout, chain: &[(u64, u64)]) -> Vec<Problem> {
        let mut out = self.space_problems(layout, chain);
        out.extend(self.tree_problems());
        out
    }

    fn space_problems(&self, layout: &Layout, chain: &[(u64, u64)]) -> Vec<Problem> {
        let mut out = Vec::new();
        let mut runs: Vec<(u64, u64, Owner)> = chain
            .iter()
            .map(|&(b, l)| (b, l, Owner::Checkpoint))
            .collect();
        for (&ino, m) in &self.inodes {
            let eof_blocks = m.size.div_ceil(PAGE_SIZE_U64);
            for x in &m.extents {
                if !layout.in_data(x.dev.0, x.len) {
                    out.push(Problem::OutsideData {
                        ino,
                        block: x.dev.0,
                        len: x.len,
                    });
                    continue;
                }
                // Decoding bounds file_block + len; no overflow here.
                if x.file_block + x.len > eof_blocks {
                    out.push(Problem::PastEof {
                        ino,
                        file_block: x.file_block.max(eof_blocks),
                        size: m.size,
                    });
                }
                runs.push((x.dev.0, x.len, Owner::Inode(ino)));
            }
        }
        runs.sort_unstable();
        // Each run against the furthest-reaching run before it, so a long
        // run overlapping several later ones is caught for each.
        let mut reach: Option<(u64, Owner)> = None;
        for &(start, len, owner) in &runs {
            if let Some((end, first)) = reach {
                if end > start {
                    out.push(Problem::OwnedTwice {
                        block: start,
                        first,
                        second: owner,
                    });
                }
            }
            let end = start + len;
            if reach.is_none_or(|(e, _)| end > e) {
                reach = Some((end, owner));
            }
        }
        out
    }

    fn tree_problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        if !self.is_dir(ROOT_INO) {
            out.push(Problem::NoRoot);
            return out;
        }
        let mut links: BTreeMap<u64, u32> = BTreeMap::new();
        let mut dir_entries: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for ((parent, name), &ino) in &self.entries {
            if !self.is_dir(*parent) || !self.inodes.contains_key(&ino) || ino == ROOT_INO {
                out.push(Problem::DanglingEntry {
                    parent: *parent,
                    name: name.clone(),
                });
                continue;
            }
            if self.is_dir(ino) {
                dir_entries.entry(ino).or_default().push(*parent);
                *links.entry(ino).or_default() += 2;
                *links.entry(*parent).or_default() += 1;
            } else {
                *links.entry(ino).or_default() += 1;
            }
        }
        *links.entry(ROOT_INO).or_default() += 2;
        for (&ino, m) in &self.inodes {
            if m.kind != Kind::Dir || ino == ROOT_INO {
                continue;
            }
            match dir_entries.get(&ino).map(Vec::as_slice) {
                None | Some([]) => {}
                Some([p]) if *p == m.parent => {}
                Some(_) => out.push(Problem::BadDirLinks { ino }),
            }
        }
        if self
            .inodes
            .get(&ROOT_INO)
            .is_some_and(|r| r.parent != ROOT_INO)
        {
            out.push(Problem::BadDirLinks { ino: ROOT_INO });
        }
        // Everything linked must be reachable from the root; a directory
        // cycle is unreachable by construction.
        let reachable: BTreeSet<u64> = {
            let mut seen = BTreeSet::new();
            let mut todo = alloc::vec![ROOT_INO];
            while let Some(dir) = todo.pop() {
                if !seen.insert(dir) {
                    continue;
                }
                for ((_, _), &ino) in self
                    .entries
                    .range((dir, String::new())..)
                    .take_while(|((p, _), _)| *p == dir)
                {
                    if self.is_dir(ino) {
                        todo.push(ino);
                    } else {
                        seen.insert(ino);
                    }
                }
            }
            seen
        };
        for (&ino, m) in &self.inodes {
            let counted = links.get(&ino).copied().unwrap_or(0);
            // A directory that no entry names but that holds entries is
            // lost too: mount would reclaim it and leave them dangling.
            let holds = m.kind == Kind::Dir
                && self
                    .entries
                    .range((ino, String::new())..)
                    .next()
                    .is_some_and(|((p, _), _)| *p == ino);
            if (counted > 0 || holds) && !reachable.contains(&ino) {
                out.push(Problem::Unreachable { ino });
            }
            if m.nlink != counted {
                out.push(Problem::LinkCount {
                    ino,
                    recorded: m.nlink,
                    counted,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(fb: u64, dev: u64, len: u64) -> Extent {
        Extent {
            file_block: fb,
            dev: BlockNo(dev),
            len,
        }
    }

    fn inode(kind: Kind) -> InodeMeta {
        InodeMeta::new(kind, 0o644, 1000, 100, 5)
    }

    fn link(parent: u64, name: &str, ino: u64) -> Record {
        Record::Link {
            parent,
            name: name.into(),
            ino,
        }
    }

    fn rename(from: u64, f: &str, to: u64, t: &str, exchange: bool) -> Record {
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
        let recs = alloc::vec![
            Record::Inode { ino: 2, meta: file },
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
            Record::Free { ino: 2 },
            Record::ImageEnd,
        ];
        let bytes = Record::encode_all(&recs);
        assert_eq!(Record::decode_all(&bytes).unwrap(), recs);
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
        assert!(!ok(1, bad_perm));
        let mut sym = inode(Kind::Symlink);
        sym.target = "t".repeat(MAX_SYMLINK_LEN);
        sym.size = MAX_SYMLINK_LEN as u64;
        assert!(ok(1, sym.clone()));
        sym.size = 1;
        assert!(!ok(1, sym));
        let mut dir = inode(Kind::Dir);
        dir.size = 1;
        assert!(!ok(1, dir));
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
    }

    /// A tree: /d (dir 2), /d/f (file 3, also linked as /g), /e (dir 4).
    fn tree() -> Shadow {
        let mut s = Shadow::empty(0, 0, 0);
        for r in [
            Record::Inode {
                ino: 2,
                meta: inode(Kind::Dir),
            },
            link(ROOT_INO, "d", 2),
            Record::Inode {
                ino: 3,
                meta: inode(Kind::File),
            },
            link(2, "f", 3),
            link(ROOT_INO, "g", 3),
            Record::Inode {
                ino: 4,
                meta: inode(Kind::Dir),
            },
            link(ROOT_INO, "e", 4),
        ] {
            s.apply(&r).unwrap();
        }
        s
    }

    #[test]
    fn links_count_and_directories_know_their_parent() {
        let mut s = tree();
        let layout = Layout::for_blocks(100_000).unwrap();
        assert_eq!(s.problems(&layout, &[]), []);
        assert_eq!(s.inodes[&ROOT_INO].nlink, 4, "., two subdirectories' ..");
        assert_eq!(s.inodes[&2].nlink, 2);
        assert_eq!(s.inodes[&3].nlink, 2);
        // A directory moves: its `..` and both parents' counts follow.
        s.apply(&rename(ROOT_INO, "e", 2, "e", false)).unwrap();
        assert_eq!(s.inodes[&4].parent, 2);
        assert_eq!((s.inodes[&ROOT_INO].nlink, s.inodes[&2].nlink), (3, 3));
        // Exchange swaps entries; renaming over a file unlinks it.
        s.apply(&rename(2, "f", 2, "e", true)).unwrap();
        assert_eq!(s.entries[&(2, "f".into())], 4);
        s.apply(&Record::Unlink {
            parent: ROOT_INO,
            name: "g".into(),
        })
        .unwrap();
        assert_eq!(s.inodes[&3].nlink, 1);
        assert_eq!(s.problems(&layout, &[]), []);
        // The image loads back to the same state.
        let mut again = Shadow::default();
        let mut in_image = true;
        for r in Record::decode_all(&s.image()).unwrap() {
            if r == Record::ImageEnd {
                in_image = false;
            } else {
                assert!(in_image);
                again.load(&r).unwrap();
            }
        }
        assert_eq!(again, s);
        assert_eq!(s.image().len() as u64, s.image_len());
    }

    #[test]
    fn records_that_make_no_sense_are_refused() {
        let mut s = tree();
        assert!(s.apply(&link(ROOT_INO, "d", 3)).is_err(), "over an entry");
        assert!(s.apply(&link(3, "x", 2)).is_err(), "into a file");
        assert!(s
            .apply(&Record::Unlink {
                parent: ROOT_INO,
                name: "nope".into()
            })
            .is_err());
        assert!(s
            .apply(&rename(ROOT_INO, "nope", ROOT_INO, "x", false))
            .is_err());
        assert!(s.apply(&Record::Free { ino: 3 }).is_err(), "still linked");
        assert!(s.apply(&Record::ImageEnd).is_err());
    }

    #[test]
    fn tree_problems_are_found() {
        let layout = Layout::for_blocks(100_000).unwrap();
        // A cycle: /d/e/d's parent chain never reaches the root.
        let mut s = tree();
        s.drop_entry(ROOT_INO, "d");
        s.put_entry(4, String::from("d"), 2);
        s.inodes.get_mut(&2).unwrap().parent = 4;
        s.put_entry(2, String::from("e2"), 4);
        let p = s.problems(&layout, &[]);
        assert!(
            p.iter()
                .any(|p| matches!(p, Problem::BadDirLinks { ino: 4 })),
            "{p:?}"
        );
        // A dangling entry and a wrong count.
        let mut s = tree();
        s.put_entry(ROOT_INO, String::from("ghost"), 99);
        s.set_nlink(3, 7);
        let p = s.problems(&layout, &[]);
        assert!(p.contains(&Problem::DanglingEntry {
            parent: ROOT_INO,
            name: "ghost".into()
        }));
        assert!(p.contains(&Problem::LinkCount {
            ino: 3,
            recorded: 7,
            counted: 2
        }));
        // An unreachable directory.
        let mut s = tree();
        s.drop_entry(ROOT_INO, "d");
        s.put_entry(4, String::from("d"), 2);
        let p = s.problems(&layout, &[]);
        assert!(
            p.iter()
                .any(|p| matches!(p, Problem::BadDirLinks { ino: 2 })),
            "{p:?}"
        );
        // An orphan (no link, count 0) is no problem: recovery reclaims it.
        let mut s = tree();
        s.apply(&Record::Inode {
            ino: 9,
            meta: inode(Kind::File),
        })
        .unwrap();
        assert_eq!(s.problems(&layout, &[]), []);
        assert_eq!(s.orphans(), [9]);
    }

    #[test]
    fn blocks_owned_twice_are_reported() {
        let mut s = tree();
        let mut a = inode(Kind::File);
        a.size = 8 * 4096;
        a.extents = alloc::vec![ext(0, 5000, 8)];
        s.apply(&Record::Inode { ino: 3, meta: a }).unwrap();
        let layout = Layout::for_blocks(100_000).unwrap();
        let p = s.problems(&layout, &[(5006, 1)]);
        assert!(p.contains(&Problem::OwnedTwice {
            block: 5006,
            first: Owner::Inode(3),
            second: Owner::Checkpoint
        }));
    }
}
