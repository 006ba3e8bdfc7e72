//! Fuzzed values, and records that can hold any of them: the same bytes
//! as [`Record`]'s encoding, but with nothing checked, so a crafted
//! record can carry a value at, or past, any limit the decoder enforces.

use arbitrary::Arbitrary;
use pollfs_core::persist::format::{Enc, Layout, MAX_SEQUENCE};
use pollfs_core::persist::record::Record;

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
    /// starts, sequence numbers), by index.
    Known(u8),
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

/// What a value resolves against.
#[derive(Clone, Debug)]
pub struct Cx {
    /// The base image's layout.
    pub layout: Layout,
    /// Values the base image uses.
    pub known: Vec<u64>,
    /// Names the base image uses.
    pub names: Vec<Vec<u8>>,
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
            Anchor::Known(i) => self
                .known
                .get(usize::from(i) % self.known.len().max(1))
                .copied()
                .unwrap_or(0),
            Anchor::Raw(x) => x,
        };
        at.wrapping_add(i64::from(v.delta) as u64)
    }

    /// A name: one the image uses, or a fresh short one.
    pub fn name(&self, seed: u8) -> Vec<u8> {
        match self.names.get(usize::from(seed)) {
            Some(n) => n.clone(),
            None => format!("x{seed}").into_bytes(),
        }
    }
}

/// Record tags, as [`Record::encode`] writes them (checked against it
/// when the base image is read).
pub const TAG_CREATE: u8 = 1;
/// See [`TAG_CREATE`].
pub const TAG_REMOVE: u8 = 2;
/// See [`TAG_CREATE`].
pub const TAG_RENAME: u8 = 3;
/// See [`TAG_CREATE`].
pub const TAG_STATE: u8 = 4;

/// A record with every field free: `name_len` and `count` are what the
/// encoding says, whatever `name` and `extents` hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rec {
    /// Record type; unknown tags encode as the tag and an inode number.
    pub tag: u8,
    /// Inode number.
    pub ino: u64,
    /// Encoded name length (Create, Rename).
    pub name_len: u16,
    /// Name bytes (Create, Rename).
    pub name: Vec<u8>,
    /// Size (State).
    pub size: u64,
    /// Encoded extent count (State).
    pub count: u32,
    /// Extents as (file block, device block, length) (State).
    pub extents: Vec<[u64; 3]>,
}

impl From<&Record> for Rec {
    fn from(r: &Record) -> Rec {
        let named = |tag, ino: u64, name: &str| Rec {
            tag,
            ino,
            name_len: name.len() as u16,
            name: name.as_bytes().to_vec(),
            ..Rec::default()
        };
        match r {
            Record::Create { ino, name } => named(TAG_CREATE, *ino, name),
            Record::Rename { ino, to } => named(TAG_RENAME, *ino, to),
            Record::Remove { ino } => Rec {
                tag: TAG_REMOVE,
                ino: *ino,
                ..Rec::default()
            },
            Record::State { ino, size, extents } => Rec {
                tag: TAG_STATE,
                ino: *ino,
                size: *size,
                count: extents.len() as u32,
                extents: extents
                    .iter()
                    .map(|x| [x.file_block, x.dev.0, x.len])
                    .collect(),
                ..Rec::default()
            },
        }
    }
}

impl Rec {
    /// Appends the encoding.
    pub fn encode(&self, e: &mut Enc) {
        e.u8(self.tag);
        e.u64(self.ino);
        match self.tag {
            TAG_CREATE | TAG_RENAME => {
                e.u16(self.name_len);
                e.bytes(&self.name);
            }
            TAG_STATE => {
                e.u64(self.size);
                e.u32(self.count);
                for x in &self.extents {
                    x.iter().for_each(|&v| e.u64(v));
                }
            }
            _ => {}
        }
    }

    /// A new name, with its encoded length.
    pub fn set_name(&mut self, name: Vec<u8>) {
        self.name_len = name.len() as u16;
        self.name = name;
    }
}

/// Encodes `recs`.
pub fn encode(recs: &[Rec]) -> Vec<u8> {
    let mut e = Enc::default();
    recs.iter().for_each(|r| r.encode(&mut e));
    e.0
}
