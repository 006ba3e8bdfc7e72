//! Fuzzed values, and records that can hold any of them: the same bytes
//! as [`Record`]'s encoding, but with nothing checked, so a crafted
//! record can carry a value at, or past, any limit the decoder enforces.

use arbitrary::Arbitrary;
use pollfs_core::persist::format::{Enc, Layout, MAX_SEQUENCE};
use pollfs_core::persist::record::{Kind, Record};

/// Where a fuzzed value starts from.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Anchor {
    /// 0.
    Zero,
    /// The value the field has now.
    Current,
    /// The limit the decoder or the layout sets for this field.
    Limit,
    /// `u16::MAX`.
    U16Max,
    /// `u32::MAX`.
    U32Max,
    /// `u64::MAX`.
    U64Max,
    /// The first data block.
    DataStart,
    /// The filesystem's size in blocks.
    Blocks,
    /// The largest generation or sequence number accepted.
    MaxSequence,
    /// One of the values the base image uses (inode numbers, extent
    /// starts, sequence numbers, checkpoint blocks), by index.
    Known(u8),
    /// One of the base image's inode numbers, by index.
    Ino(u8),
    /// One of the base image's directories, by index.
    Dir(u8),
    /// Any value.
    Raw(u64),
}

/// An anchor plus a small step, so that both sides of every limit are
/// one mutation away.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct Value {
    /// Where to start.
    pub anchor: Anchor,
    /// Added (wrapping).
    pub delta: i8,
}

/// An entry of the base image's tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The directory.
    pub parent: u64,
    /// The name.
    pub name: Vec<u8>,
    /// The inode it names.
    pub ino: u64,
}

/// What a value resolves against.
#[derive(Clone, Debug)]
pub struct Cx {
    /// The base image's layout.
    pub layout: Layout,
    /// Values the base image uses.
    pub known: Vec<u64>,
    /// Inode numbers the base image uses.
    pub inos: Vec<u64>,
    /// Its directories.
    pub dirs: Vec<u64>,
    /// Names it uses.
    pub names: Vec<Vec<u8>>,
    /// Its entries, as the checkpoint and the log leave them.
    pub entries: Vec<Entry>,
}

fn nth(v: &[u64], i: u8) -> u64 {
    v.get(usize::from(i) % v.len().max(1)).copied().unwrap_or(0)
}

impl Cx {
    /// `v` for a field whose value is `current` and whose limit is `limit`.
    pub fn resolve(&self, v: Value, current: u64, limit: u64) -> u64 {
        let at = match v.anchor {
            Anchor::Zero => 0,
            Anchor::Current => current,
            Anchor::Limit => limit,
            Anchor::U16Max => u64::from(u16::MAX),
            Anchor::U32Max => u64::from(u32::MAX),
            Anchor::U64Max => u64::MAX,
            Anchor::DataStart => self.layout.data_start,
            Anchor::Blocks => self.layout.blocks,
            Anchor::MaxSequence => MAX_SEQUENCE,
            Anchor::Known(i) => nth(&self.known, i),
            Anchor::Ino(i) => nth(&self.inos, i),
            Anchor::Dir(i) => nth(&self.dirs, i),
            Anchor::Raw(x) => x,
        };
        at.wrapping_add(i64::from(v.delta) as u64)
    }

    /// A name: one the image uses, one the decoder must refuse, or a
    /// fresh short one.
    pub fn name(&self, seed: u8) -> Vec<u8> {
        const ODD: [&[u8]; 8] = [b".", b"..", b"a/b", b"/", b"a\0b", b"\xff\xfe", b"", b"#2"];
        if let Some(n) = self.names.get(usize::from(seed)) {
            return n.clone();
        }
        match ODD.get(usize::from(seed) % 32) {
            Some(odd) => odd.to_vec(),
            None => format!("x{seed}").into_bytes(),
        }
    }

    /// An entry of the base image, by index.
    pub fn entry(&self, i: u8) -> Option<&Entry> {
        self.entries.get(usize::from(i) % self.entries.len().max(1))
    }

    /// An inode number no record of the base image uses.
    pub fn fresh_ino(&self) -> u64 {
        self.inos.iter().copied().max().unwrap_or(0) + 1
    }
}

/// Record tags, the engine's own (`persist::record::tag`).
pub use pollfs_core::persist::record::tag::{
    DATA as TAG_DATA, FREE as TAG_FREE, HOME as TAG_HOME, IMAGE_END as TAG_IMAGE_END,
    INODE as TAG_INODE, LINK as TAG_LINK, RENAME as TAG_RENAME, UNLINK as TAG_UNLINK,
    XATTR as TAG_XATTR,
};

/// Inode kind codes, as [`Record::encode`] writes them.
pub const KIND_FILE: u8 = Kind::File.code();
/// See [`KIND_FILE`].
pub const KIND_DIR: u8 = Kind::Dir.code();
/// See [`KIND_FILE`].
pub const KIND_SYMLINK: u8 = Kind::Symlink.code();

/// Bytes with an encoded length of their own (a name, a link target):
/// `len` is what the encoding says, whatever `bytes` hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Text {
    /// Encoded length.
    pub len: u16,
    /// The bytes.
    pub bytes: Vec<u8>,
}

impl Text {
    /// `bytes`, with their own length.
    pub fn new(bytes: Vec<u8>) -> Text {
        Text {
            len: bytes.len() as u16,
            bytes,
        }
    }

    fn encode(&self, e: &mut Enc) {
        e.u16(self.len);
        e.bytes(&self.bytes);
    }
}

/// A record with every field free. Which fields are encoded follows the
/// tag (and, for an inode, the kind code), as the engine's encoder does;
/// an unknown tag encodes as the tag and an inode number.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rec {
    /// Record type.
    pub tag: u8,
    /// The inode (Inode, Link, Free).
    pub ino: u64,
    /// The directory (Link, Unlink; Rename's source), or a directory
    /// inode's parent (Inode).
    pub parent: u64,
    /// The entry's name (Link, Unlink; Rename's source name), or the
    /// attribute's (Xattr).
    pub name: Text,
    /// Rename's destination directory.
    pub to: u64,
    /// Rename's destination name.
    pub to_name: Text,
    /// Rename's flags byte (0, or 1 for an exchange); Xattr's operation
    /// (0 remove, 1 set).
    pub flags: u8,
    /// Inode kind code.
    pub kind: u8,
    /// Permission bits.
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Link count.
    pub nlink: u32,
    /// Size.
    pub size: u64,
    /// Access, modification and change times.
    pub times: [u64; 3],
    /// Encoded extent count (a file).
    pub count: u32,
    /// Extents as (file block, device block, length) (a file).
    pub extents: Vec<[u64; 3]>,
    /// Link target (a symbolic link).
    pub target: Text,
    /// The page (Data, Home).
    pub page: u64,
    /// The page's device block (Data).
    pub block: u64,
    /// The page's bytes (Data; 4 KiB in a valid record), or the
    /// attribute's value (Xattr).
    pub bytes: Vec<u8>,
}

fn text(s: &str) -> Text {
    Text::new(s.as_bytes().to_vec())
}

impl From<&Record> for Rec {
    fn from(r: &Record) -> Rec {
        match r {
            Record::Inode { ino, meta: m } => Rec {
                tag: TAG_INODE,
                ino: *ino,
                parent: m.parent,
                kind: m.kind.code(),
                perm: m.perm,
                uid: m.uid,
                gid: m.gid,
                nlink: m.nlink,
                size: m.size,
                times: [m.atime, m.mtime, m.ctime],
                count: m.extents.len() as u32,
                extents: m
                    .extents
                    .iter()
                    .map(|x| [x.file_block, x.dev.0, x.len])
                    .collect(),
                target: text(&m.target),
                ..Rec::default()
            },
            Record::Link { parent, name, ino } => Rec {
                tag: TAG_LINK,
                parent: *parent,
                name: text(name),
                ino: *ino,
                ..Rec::default()
            },
            Record::Unlink { parent, name } => Rec {
                tag: TAG_UNLINK,
                parent: *parent,
                name: text(name),
                ..Rec::default()
            },
            Record::Rename {
                from,
                from_name,
                to,
                to_name,
                exchange,
            } => Rec {
                tag: TAG_RENAME,
                parent: *from,
                name: text(from_name),
                to: *to,
                to_name: text(to_name),
                flags: u8::from(*exchange),
                ..Rec::default()
            },
            Record::Free { ino } => Rec {
                tag: TAG_FREE,
                ino: *ino,
                ..Rec::default()
            },
            Record::ImageEnd => Rec {
                tag: TAG_IMAGE_END,
                ..Rec::default()
            },
            Record::Data {
                ino,
                page,
                block,
                bytes,
            } => Rec {
                tag: TAG_DATA,
                ino: *ino,
                page: *page,
                block: *block,
                bytes: bytes.clone(),
                ..Rec::default()
            },
            Record::Home { ino, page } => Rec {
                tag: TAG_HOME,
                ino: *ino,
                page: *page,
                ..Rec::default()
            },
            Record::Xattr { ino, name, value } => Rec {
                tag: TAG_XATTR,
                ino: *ino,
                name: text(name),
                flags: u8::from(value.is_some()),
                bytes: value.clone().unwrap_or_default(),
                ..Rec::default()
            },
        }
    }
}

impl Rec {
    /// Appends the encoding.
    pub fn encode(&self, e: &mut Enc) {
        e.u8(self.tag);
        match self.tag {
            TAG_INODE => {
                e.u64(self.ino);
                e.u8(self.kind);
                e.u16(self.perm);
                e.u32(self.uid);
                e.u32(self.gid);
                e.u32(self.nlink);
                e.u64(self.parent);
                e.u64(self.size);
                self.times.iter().for_each(|&t| e.u64(t));
                match self.kind {
                    KIND_FILE => {
                        e.u32(self.count);
                        for x in &self.extents {
                            x.iter().for_each(|&v| e.u64(v));
                        }
                    }
                    KIND_SYMLINK => self.target.encode(e),
                    _ => {}
                }
            }
            TAG_LINK => {
                e.u64(self.parent);
                e.u64(self.ino);
                self.name.encode(e);
            }
            TAG_UNLINK => {
                e.u64(self.parent);
                self.name.encode(e);
            }
            TAG_RENAME => {
                e.u64(self.parent);
                self.name.encode(e);
                e.u64(self.to);
                self.to_name.encode(e);
                e.u8(self.flags);
            }
            TAG_IMAGE_END => {}
            TAG_DATA => {
                e.u64(self.ino);
                e.u64(self.page);
                e.u64(self.block);
                e.bytes(&self.bytes);
            }
            TAG_HOME => {
                e.u64(self.ino);
                e.u64(self.page);
            }
            TAG_XATTR => {
                e.u64(self.ino);
                self.name.encode(e);
                e.u8(self.flags);
                if self.flags == 1 {
                    e.u32(self.bytes.len() as u32);
                    e.bytes(&self.bytes);
                }
            }
            _ => e.u64(self.ino),
        }
    }

    /// True for an inode record with kind code `kind`.
    pub fn is_inode(&self, kind: u8) -> bool {
        self.tag == TAG_INODE && self.kind == kind
    }
}

/// Encodes `recs`.
pub fn encode(recs: &[Rec]) -> Vec<u8> {
    let mut e = Enc::default();
    recs.iter().for_each(|r| r.encode(&mut e));
    e.0
}
