//! fsck's checks of durable metadata: what a [`Problem`] is, the checks
//! of space (extents inside the data area and within their file's size,
//! no block owned twice) and of extended attributes' totals. The tree's own checks are
//! [`Tree::problems`](super::tree::Tree::problems); [`Shadow::problems`]
//! runs both.
//!
//! [`Shadow::problems`]: super::shadow::Shadow::problems

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use super::format::Layout;
use super::record::InodeMeta;
use crate::units::PAGE_SIZE_U64;

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
    /// An inode's extended attributes pass their total
    /// ([`INODE_TOTAL_MAX`](super::xattr::INODE_TOTAL_MAX)).
    XattrsTooLarge {
        /// The inode.
        ino: u64,
        /// Bytes of its names and values.
        bytes: usize,
    },
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
            Problem::XattrsTooLarge { ino, bytes } => write!(
                f,
                "inode {ino}: extended attributes hold {bytes} bytes, past the {} allowed",
                super::xattr::INODE_TOTAL_MAX
            ),
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

/// Every problem with the space `inodes` map on `layout`, given the
/// checkpoint chain's blocks: extents outside the data area or past EOF,
/// and blocks owned twice.
pub fn space_problems(
    inodes: &BTreeMap<u64, InodeMeta>,
    layout: &Layout,
    chain: &[(u64, u64)],
) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut runs: Vec<(u64, u64, Owner)> = chain
        .iter()
        .map(|&(b, l)| (b, l, Owner::Checkpoint))
        .collect();
    for (&ino, m) in inodes {
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

/// Inodes whose extended attributes pass their total, from
/// `((ino, name), value)` in inode order.
pub fn xattr_problems<'a>(
    xattrs: impl Iterator<Item = (&'a (u64, String), &'a Vec<u8>)>,
) -> Vec<Problem> {
    let mut totals: BTreeMap<u64, usize> = BTreeMap::new();
    for ((ino, name), value) in xattrs {
        *totals.entry(*ino).or_default() += super::xattr::cost(name, value);
    }
    totals
        .into_iter()
        .filter(|&(_, bytes)| bytes > super::xattr::INODE_TOTAL_MAX)
        .map(|(ino, bytes)| Problem::XattrsTooLarge { ino, bytes })
        .collect()
}
