//! Log records and the durable metadata they describe.
//!
//! The log holds namespace records (create, remove, rename) and inode
//! states: an inode's whole size and extent list, built from the in-memory
//! inode when it is synced (btrfs's fast fsync logs the inode, not the
//! history of changes). Replaying the records after a checkpoint's image
//! rebuilds every name, size and extent map; the allocator is rebuilt as
//! "everything in the data area that no extent and no checkpoint frame
//! uses".
//!
//! Decoding checks every value against the engine's limits (inode numbers,
//! sizes, extent ranges, names), so nothing read from disk can overflow
//! arithmetic later or describe a file the engine could not hold.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use super::format::{Dec, Enc, Layout, Short};
use crate::error::Damage;
use crate::space::Extent;
use crate::units::{
    BlockNo, MAX_FILE_PAGES, MAX_FILE_SIZE, MAX_INODE, MAX_NAME_LEN, PAGE_SIZE_U64,
};

const TAG_CREATE: u8 = 1;
const TAG_REMOVE: u8 = 2;
const TAG_RENAME: u8 = 3;
const TAG_STATE: u8 = 4;

/// Bytes of an encoded extent.
const EXTENT_LEN: u64 = 24;

/// One log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A file named `name` was created as inode `ino`.
    Create {
        /// The inode.
        ino: u64,
        /// Its name.
        name: String,
    },
    /// Inode `ino` and its name are gone.
    Remove {
        /// The inode.
        ino: u64,
    },
    /// Inode `ino` is now named `to` (replacing any file of that name).
    Rename {
        /// The inode.
        ino: u64,
        /// The new name.
        to: String,
    },
    /// Inode `ino`'s size and every extent, as of a sync.
    State {
        /// The inode.
        ino: u64,
        /// Size in bytes.
        size: u64,
        /// Every mapped run, in file order.
        extents: Vec<Extent>,
    },
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
    if s.bytes().any(|b| b == 0 || b == b'/') {
        return Err(Damage::Record("name contains NUL or '/'"));
    }
    Ok(String::from(s))
}

/// Bytes of the encoding of a `Create` plus a `State` with `extents`
/// extents for a name of `name_len` bytes: what one file costs in a
/// checkpoint.
pub fn file_image_len(name_len: usize, extents: usize) -> u64 {
    (1 + 8 + 2 + name_len as u64) + (1 + 8 + 8 + 4) + EXTENT_LEN * extents as u64
}

impl Record {
    /// Appends the encoding.
    pub fn encode(&self, e: &mut Enc) {
        match self {
            Record::Create { ino, name } | Record::Rename { ino, to: name } => {
                e.u8(if matches!(self, Record::Create { .. }) {
                    TAG_CREATE
                } else {
                    TAG_RENAME
                });
                e.u64(*ino);
                e.u16(name.len() as u16);
                e.bytes(name.as_bytes());
            }
            Record::Remove { ino } => {
                e.u8(TAG_REMOVE);
                e.u64(*ino);
            }
            Record::State { ino, size, extents } => {
                e.u8(TAG_STATE);
                e.u64(*ino);
                e.u64(*size);
                e.u32(extents.len() as u32);
                for x in extents {
                    e.u64(x.file_block);
                    e.u64(x.dev.0);
                    e.u64(x.len);
                }
            }
        }
    }

    /// Decodes one record, checking every value.
    pub fn decode(d: &mut Dec<'_>) -> Result<Record, Damage> {
        Ok(match d.u8().map_err(short)? {
            TAG_CREATE => Record::Create {
                ino: ino(d)?,
                name: name(d)?,
            },
            TAG_RENAME => Record::Rename {
                ino: ino(d)?,
                to: name(d)?,
            },
            TAG_REMOVE => Record::Remove { ino: ino(d)? },
            TAG_STATE => {
                let ino = ino(d)?;
                let size = d.u64().map_err(short)?;
                if size > MAX_FILE_SIZE {
                    return Err(Damage::Record("file size past the largest file"));
                }
                let n = d.u32().map_err(short)? as usize;
                if n > d.remaining() / EXTENT_LEN as usize {
                    return Err(Damage::Record("extent count past the record's end"));
                }
                let mut extents = Vec::with_capacity(n);
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
                    extents.push(Extent {
                        file_block,
                        dev: BlockNo(dev),
                        len,
                    });
                }
                Record::State { ino, size, extents }
            }
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

/// One file as the durable metadata describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileMeta {
    /// Its name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Mapped runs, in file order.
    pub extents: Vec<Extent>,
}

impl FileMeta {
    fn image_len(&self) -> u64 {
        file_image_len(self.name.len(), self.extents.len())
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
        }
    }
}

/// The metadata a crash would leave: the checkpoint plus every durable
/// log record. Kept in memory to write the next checkpoint from (so a
/// checkpoint never references data that is not durable).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shadow {
    /// Inode -> file.
    pub files: BTreeMap<u64, FileMeta>,
    names: BTreeMap<String, u64>,
    /// Bytes of this state's checkpoint image.
    image_len: u64,
}

impl Shadow {
    /// Applies one record. Records that make no sense against the state
    /// (a second create of a name) are errors: the image is corrupt.
    pub fn apply(&mut self, r: &Record) -> Result<(), Damage> {
        match r {
            Record::Create { ino, name } => {
                if self.names.contains_key(name) || self.files.contains_key(ino) {
                    return Err(Damage::Replay("create of an existing name or inode"));
                }
                self.names.insert(name.clone(), *ino);
                let f = FileMeta {
                    name: name.clone(),
                    ..FileMeta::default()
                };
                self.image_len += f.image_len();
                self.files.insert(*ino, f);
            }
            Record::Remove { ino } => self.remove(*ino),
            Record::Rename { ino, to } => {
                let Some(old) = self.files.get(ino).map(|f| f.name.clone()) else {
                    return Ok(());
                };
                if let Some(&replaced) = self.names.get(to) {
                    if replaced != *ino {
                        self.remove(replaced);
                    }
                }
                self.names.remove(&old);
                self.names.insert(to.clone(), *ino);
                if let Some(f) = self.files.get_mut(ino) {
                    self.image_len -= f.image_len();
                    f.name = to.clone();
                    self.image_len += f.image_len();
                }
            }
            Record::State { ino, size, extents } => {
                if let Some(f) = self.files.get_mut(ino) {
                    self.image_len -= f.image_len();
                    f.size = *size;
                    f.extents = extents.clone();
                    self.image_len += f.image_len();
                }
            }
        }
        Ok(())
    }

    fn remove(&mut self, ino: u64) {
        if let Some(f) = self.files.remove(&ino) {
            self.names.remove(&f.name);
            self.image_len -= f.image_len();
        }
    }

    /// Bytes of this state's checkpoint image ([`Shadow::image`] encoded).
    pub fn image_len(&self) -> u64 {
        self.image_len
    }

    /// The records that rebuild this state from nothing (a checkpoint),
    /// encoded.
    pub fn image(&self) -> Vec<u8> {
        let mut e = Enc(Vec::with_capacity(self.image_len as usize));
        for (&ino, f) in &self.files {
            Record::Create {
                ino,
                name: f.name.clone(),
            }
            .encode(&mut e);
            // Encoded in place rather than through a cloned `Record`: a
            // fragmented file's extent list can be large.
            e.u8(TAG_STATE);
            e.u64(ino);
            e.u64(f.size);
            e.u32(f.extents.len() as u32);
            for x in &f.extents {
                e.u64(x.file_block);
                e.u64(x.dev.0);
                e.u64(x.len);
            }
        }
        debug_assert_eq!(e.0.len() as u64, self.image_len);
        e.0
    }

    /// Drops the extents of `ino` that `keep` refuses (for repair).
    pub fn retain_extents(&mut self, ino: u64, mut keep: impl FnMut(&Extent) -> bool) {
        if let Some(f) = self.files.get_mut(&ino) {
            self.image_len -= f.image_len();
            f.extents.retain(|x| keep(x));
            self.image_len += f.image_len();
        }
    }

    /// Every problem with this state on `layout`, given the checkpoint
    /// chain's blocks: extents outside the data area or past EOF, blocks
    /// owned twice.
    pub fn problems(&self, layout: &Layout, chain: &[(u64, u64)]) -> Vec<Problem> {
        let mut out = Vec::new();
        let mut runs: Vec<(u64, u64, Owner)> = chain
            .iter()
            .map(|&(b, l)| (b, l, Owner::Checkpoint))
            .collect();
        for (&ino, f) in &self.files {
            let eof_blocks = f.size.div_ceil(PAGE_SIZE_U64);
            for x in &f.extents {
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
                        size: f.size,
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

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let recs = alloc::vec![
            Record::Create {
                ino: 1,
                name: "a".into()
            },
            Record::State {
                ino: 1,
                size: 8192,
                extents: alloc::vec![ext(0, 100, 2)]
            },
            Record::Rename {
                ino: 1,
                to: "b".into()
            },
            Record::Remove { ino: 1 },
        ];
        let bytes = Record::encode_all(&recs);
        assert_eq!(Record::decode_all(&bytes).unwrap(), recs);
        assert!(Record::decode_all(&[9]).is_err());
        assert!(Record::decode_all(&[TAG_STATE, 1, 0, 0, 0, 0, 0, 0, 0]).is_err());
        // An extent count that the payload cannot hold.
        let mut e = Enc::default();
        e.u8(TAG_STATE);
        e.u64(1);
        e.u64(0);
        e.u32(u32::MAX);
        assert!(Record::decode_all(&e.0).is_err());
    }

    #[test]
    fn values_at_and_past_their_limits() {
        let state =
            |ino, size, extents| Record::encode_all(&[Record::State { ino, size, extents }]);
        let ok = |b: Vec<u8>| Record::decode_all(&b).is_ok();
        assert!(ok(state(MAX_INODE, MAX_FILE_SIZE, alloc::vec![])));
        assert!(!ok(state(MAX_INODE + 1, 0, alloc::vec![])));
        assert!(!ok(state(0, 0, alloc::vec![])));
        assert!(!ok(state(u64::MAX, 0, alloc::vec![])));
        assert!(!ok(state(1, MAX_FILE_SIZE + 1, alloc::vec![])));
        assert!(ok(state(1, 0, alloc::vec![ext(MAX_FILE_PAGES - 1, 9, 1)])));
        assert!(!ok(state(1, 0, alloc::vec![ext(MAX_FILE_PAGES - 1, 9, 2)])));
        assert!(!ok(state(1, 0, alloc::vec![ext(0, 9, u64::MAX)])));
        assert!(!ok(state(1, 0, alloc::vec![ext(0, u64::MAX, 2)])));
        assert!(!ok(state(1, 0, alloc::vec![ext(0, 9, 0)])));
        assert!(!ok(state(1, 0, alloc::vec![ext(4, 9, 2), ext(5, 20, 1)])));
        let create = |name: &str| {
            let mut e = Enc::default();
            e.u8(TAG_CREATE);
            e.u64(1);
            e.u16(name.len() as u16);
            e.bytes(name.as_bytes());
            Record::decode_all(&e.0).is_ok()
        };
        assert!(create(&"n".repeat(MAX_NAME_LEN)));
        assert!(!create(&"n".repeat(MAX_NAME_LEN + 1)));
        assert!(!create("a/b"));
        assert!(!create(""));
    }

    #[test]
    fn shadow_applies_rename_over_and_reports_double_ownership() {
        let mut s = Shadow::default();
        s.apply(&Record::Create {
            ino: 1,
            name: "a".into(),
        })
        .unwrap();
        s.apply(&Record::Create {
            ino: 2,
            name: "b".into(),
        })
        .unwrap();
        assert!(s
            .apply(&Record::Create {
                ino: 3,
                name: "a".into()
            })
            .is_err());
        s.apply(&Record::State {
            ino: 1,
            size: 4096 * 8,
            extents: alloc::vec![ext(0, 5000, 8)],
        })
        .unwrap();
        s.apply(&Record::State {
            ino: 2,
            size: 4096,
            extents: alloc::vec![ext(0, 5003, 1)],
        })
        .unwrap();
        let layout = Layout::for_blocks(100_000).unwrap();
        let problems = s.problems(&layout, &[(5006, 1)]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.contains(&Problem::OwnedTwice {
            block: 5003,
            first: Owner::Inode(1),
            second: Owner::Inode(2)
        }));
        assert!(
            problems.contains(&Problem::OwnedTwice {
                block: 5006,
                first: Owner::Checkpoint,
                second: Owner::Inode(1)
            }) || problems.contains(&Problem::OwnedTwice {
                block: 5006,
                first: Owner::Inode(1),
                second: Owner::Checkpoint
            })
        );
        s.apply(&Record::Rename {
            ino: 1,
            to: "b".into(),
        })
        .unwrap();
        assert_eq!(s.files.len(), 1);
        assert_eq!(s.files[&1].name, "b");
        let image = s.image();
        assert_eq!(image.len() as u64, s.image_len());
        let mut again = Shadow::default();
        for r in Record::decode_all(&image).unwrap() {
            again.apply(&r).unwrap();
        }
        assert_eq!(again, s);
    }
}
