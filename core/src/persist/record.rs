//! Log records and the durable metadata they describe.
//!
//! The log holds namespace records (create, remove, rename) and inode
//! states: an inode's whole size and extent list, built from the in-memory
//! inode when it is synced (btrfs's fast fsync logs the inode, not the
//! history of changes). Replaying the records after a checkpoint's image
//! rebuilds every name, size and extent map; the allocator is rebuilt as
//! "everything in the data area no extent uses".

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use super::format::{Dec, Enc, Layout, Short};
use crate::space::Extent;
use crate::units::BlockNo;

const TAG_CREATE: u8 = 1;
const TAG_REMOVE: u8 = 2;
const TAG_RENAME: u8 = 3;
const TAG_STATE: u8 = 4;

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
        /// Every mapped run.
        extents: Vec<Extent>,
    },
}

fn name(d: &mut Dec<'_>) -> Result<String, Short> {
    let len = d.u16()? as usize;
    if len == 0 || len > crate::MAX_NAME_LEN {
        return Err(Short);
    }
    let s = core::str::from_utf8(d.bytes(len)?).map_err(|_| Short)?;
    if s.bytes().any(|b| b == 0 || b == b'/') {
        return Err(Short);
    }
    Ok(String::from(s))
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

    /// Decodes one record; fails on anything malformed.
    pub fn decode(d: &mut Dec<'_>) -> Result<Record, Short> {
        Ok(match d.u8()? {
            TAG_CREATE => Record::Create {
                ino: d.u64()?,
                name: name(d)?,
            },
            TAG_RENAME => Record::Rename {
                ino: d.u64()?,
                to: name(d)?,
            },
            TAG_REMOVE => Record::Remove { ino: d.u64()? },
            TAG_STATE => {
                let ino = d.u64()?;
                let size = d.u64()?;
                let n = d.u32()? as usize;
                if n > d.remaining() / 24 {
                    return Err(Short);
                }
                let mut extents = Vec::with_capacity(n);
                for _ in 0..n {
                    let file_block = d.u64()?;
                    let dev = BlockNo(d.u64()?);
                    let len = d.u64()?;
                    extents.push(Extent {
                        file_block,
                        dev,
                        len,
                    });
                }
                Record::State { ino, size, extents }
            }
            _ => return Err(Short),
        })
    }

    /// Decodes a whole payload.
    pub fn decode_all(payload: &[u8]) -> Result<Vec<Record>, Short> {
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

/// The metadata a crash would leave: the checkpoint plus every durable
/// log record. Kept in memory to write the next checkpoint from (so a
/// checkpoint never references data that is not durable).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shadow {
    /// Inode -> file.
    pub files: BTreeMap<u64, FileMeta>,
    names: BTreeMap<String, u64>,
}

impl Shadow {
    /// Applies one record. Records that make no sense against the state
    /// (a second create of a name) are errors: the image is corrupt.
    pub fn apply(&mut self, r: &Record) -> Result<(), &'static str> {
        match r {
            Record::Create { ino, name } => {
                if self.names.contains_key(name) || self.files.contains_key(ino) {
                    return Err("create of an existing name or inode");
                }
                self.names.insert(name.clone(), *ino);
                self.files.insert(
                    *ino,
                    FileMeta {
                        name: name.clone(),
                        ..FileMeta::default()
                    },
                );
            }
            Record::Remove { ino } => {
                if let Some(f) = self.files.remove(ino) {
                    self.names.remove(&f.name);
                }
            }
            Record::Rename { ino, to } => {
                let Some(old) = self.files.get(ino).map(|f| f.name.clone()) else {
                    return Ok(());
                };
                if let Some(replaced) = self.names.insert(to.clone(), *ino) {
                    if replaced != *ino {
                        self.files.remove(&replaced);
                    }
                }
                if old != *to {
                    self.names.remove(&old);
                }
                if let Some(f) = self.files.get_mut(ino) {
                    f.name = to.clone();
                }
            }
            Record::State { ino, size, extents } => {
                if let Some(f) = self.files.get_mut(ino) {
                    f.size = *size;
                    f.extents = extents.clone();
                }
            }
        }
        Ok(())
    }

    /// The records that rebuild this state from nothing (a checkpoint).
    pub fn image(&self) -> Vec<Record> {
        let mut out = Vec::with_capacity(2 * self.files.len());
        for (&ino, f) in &self.files {
            out.push(Record::Create {
                ino,
                name: f.name.clone(),
            });
            out.push(Record::State {
                ino,
                size: f.size,
                extents: f.extents.clone(),
            });
        }
        out
    }

    /// Every problem with this state on `layout`: extents outside the data
    /// area, blocks owned twice, extents past EOF.
    pub fn problems(&self, layout: &Layout) -> Vec<String> {
        let mut out = Vec::new();
        let mut runs: Vec<(u64, u64, u64)> = Vec::new();
        for (&ino, f) in &self.files {
            let eof_blocks = f.size.div_ceil(crate::units::PAGE_SIZE_U64);
            for x in &f.extents {
                let end = x.dev.0.checked_add(x.len);
                if x.len == 0
                    || x.dev.0 < layout.data_start
                    || end.is_none_or(|e| e > layout.blocks)
                {
                    out.push(alloc::format!(
                        "inode {ino} ({}): extent at block {} (+{}) is outside the data area",
                        f.name,
                        x.dev.0,
                        x.len
                    ));
                    continue;
                }
                if x.file_block.saturating_add(x.len) > eof_blocks {
                    out.push(alloc::format!(
                        "inode {ino} ({}): file block {} mapped past EOF ({} bytes)",
                        f.name,
                        x.file_block + x.len - 1,
                        f.size
                    ));
                }
                runs.push((x.dev.0, x.len, ino));
            }
        }
        runs.sort_unstable();
        for w in runs.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                out.push(alloc::format!(
                    "block {} is owned by inode {} and inode {}",
                    w[1].0,
                    w[0].2,
                    w[1].2
                ));
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
            size: 4096,
            extents: alloc::vec![ext(0, 50, 1)],
        })
        .unwrap();
        s.apply(&Record::State {
            ino: 2,
            size: 4096,
            extents: alloc::vec![ext(0, 50, 1)],
        })
        .unwrap();
        let layout = Layout::for_blocks(100_000).unwrap();
        assert!(
            !s.problems(&layout).is_empty(),
            "block 50 is outside the data area and owned twice"
        );
        s.apply(&Record::Rename {
            ino: 1,
            to: "b".into(),
        })
        .unwrap();
        assert_eq!(s.files.len(), 1);
        assert_eq!(s.files[&1].name, "b");
        let mut again = Shadow::default();
        for r in s.image() {
            again.apply(&r).unwrap();
        }
        assert_eq!(again, s);
    }
}
