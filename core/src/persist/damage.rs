//! What exactly is wrong with a damaged image: the causes
//! [`Damage`](crate::error::Damage) carries, each naming the object (a
//! block, a frame, an inode, a directory, a value) so a message can say
//! where to look.
//!
//! They are `Copy` like the rest of the crate's errors, so an entry is
//! named by its directory's inode number, not by its name.

use core::fmt;

use super::index::items::ItemDamage;
use super::index::{Key, PageDamage};

/// A superblock field that is out of range or contradicts another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SuperblockField {
    /// The block ends before the superblock does.
    Truncated,
    /// The layout does not match the filesystem's size.
    Layout {
        /// The filesystem's size in blocks.
        blocks: u64,
    },
    /// The device block size is neither 512 nor 4096.
    BlockSize(u32),
    /// The log head lies past the log.
    LogHead {
        /// The head.
        head: u64,
        /// The log's length in blocks.
        log_blocks: u64,
    },
    /// The generation or a sequence number is 0 or past the largest.
    Sequence {
        /// The generation.
        generation: u64,
        /// The checkpoint's log sequence number.
        ckpt_lsn: u64,
    },
    /// The index's root lies outside the data area, is newer than the
    /// superblock, or is deeper than a tree can be.
    IndexRoot {
        /// Its block.
        block: u64,
        /// The checkpoint that wrote it.
        generation: u64,
        /// Its level.
        level: u8,
    },
    /// The carried records' first frame lies outside the data area.
    CheckpointLocation {
        /// Its first block.
        block: u64,
        /// Its length in blocks.
        blocks: u32,
    },
    /// The carried records' size is shorter than their first frame or
    /// larger than the data area (or given with no chain).
    CheckpointSize(u64),
}

impl fmt::Display for SuperblockField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => write!(f, "truncated"),
            Self::Layout { blocks } => {
                write!(f, "the layout does not match the size ({blocks} blocks)")
            }
            Self::BlockSize(b) => write!(f, "device block size {b} is neither 512 nor 4096"),
            Self::LogHead { head, log_blocks } => {
                write!(f, "log head {head} is past the log ({log_blocks} blocks)")
            }
            Self::Sequence {
                generation,
                ckpt_lsn,
            } => write!(
                f,
                "generation {generation} or checkpoint sequence number {ckpt_lsn} is out of range"
            ),
            Self::IndexRoot {
                block,
                generation,
                level,
            } => write!(
                f,
                "index root at block {block} (generation {generation}, level {level}) \
                 is outside the data area, newer than the superblock or too deep"
            ),
            Self::CheckpointLocation { block, blocks } => write!(
                f,
                "carried records at block {block} (+{blocks}) are outside the data area"
            ),
            Self::CheckpointSize(total) => {
                write!(f, "carried records' size {total} blocks is out of range")
            }
        }
    }
}

/// What is wrong with the metadata index: a page (the block is the
/// error's), or an item in a sound page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexDamage {
    /// A page is damaged, or does not fit where its parent puts it.
    Page(PageDamage),
    /// An item's value does not decode.
    Item {
        /// Its key.
        key: Key,
        /// How.
        damage: ItemDamage,
    },
    /// An item belongs to no inode, or items of one thing disagree
    /// (pieces missing, lengths that do not add up).
    Orphan(Key),
    /// More names in one bucket than its item holds.
    BucketFull(Key),
}

fn key(f: &mut fmt::Formatter<'_>, k: &Key) -> fmt::Result {
    write!(f, "inode {} kind {} offset {}", k.ino, k.kind, k.off)
}

impl fmt::Display for IndexDamage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Page(d) => match d {
                PageDamage::Length => write!(f, "a page is cut short or has bytes left over"),
                PageDamage::Magic => write!(f, "not an index page"),
                PageDamage::Checksum => write!(f, "a page's checksum mismatches"),
                PageDamage::Uuid => write!(f, "a page of another filesystem"),
                PageDamage::Misplaced { written_for } => {
                    write!(f, "a page written for block {written_for}")
                }
                PageDamage::Stale { found } => write!(
                    f,
                    "a page of checkpoint {found}, not the one its parent names \
                     (a lost or misdirected write)"
                ),
                PageDamage::Header => write!(f, "a page's header is out of range"),
                PageDamage::ValueTooLarge => write!(f, "a value longer than an item holds"),
                PageDamage::Order => write!(f, "keys out of order or outside their range"),
                PageDamage::Pointer => write!(f, "a child pointer out of range"),
                PageDamage::Level { expected, found } => {
                    write!(f, "a page at level {found} where level {expected} belongs")
                }
                PageDamage::Empty => write!(f, "an empty page below the root"),
                PageDamage::Shared => write!(f, "a page reached twice"),
            },
            Self::Item { key: k, damage } => {
                write!(f, "item ")?;
                key(f, k)?;
                match damage {
                    ItemDamage::Length => write!(f, " is cut short or too long"),
                    ItemDamage::Kind => write!(f, " is of an unknown kind"),
                    ItemDamage::Field(name) => write!(f, ": {name} out of range"),
                }
            }
            Self::Orphan(k) => {
                write!(f, "item ")?;
                key(f, k)?;
                write!(
                    f,
                    " belongs to no inode or disagrees with its inode's others"
                )
            }
            Self::BucketFull(k) => {
                write!(f, "bucket ")?;
                key(f, k)?;
                write!(f, " holds more names than fit")
            }
        }
    }
}

/// A checkpoint frame that is missing, damaged or out of place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckpointDamage {
    /// Frame `index` lies outside the data area.
    OutsideData {
        /// The frame's place in the chain.
        index: u32,
    },
    /// The chain reaches frame `index` by looping, or is longer than the
    /// superblock says.
    Loops {
        /// The frame's place in the chain.
        index: u32,
    },
    /// Frame `index`'s header is invalid.
    Header {
        /// The frame's place in the chain.
        index: u32,
    },
    /// Frame `index` belongs to another checkpoint or filesystem.
    Foreign {
        /// The frame's place in the chain.
        index: u32,
    },
    /// Frame `index`'s checksum mismatches.
    Checksum {
        /// The frame's place in the chain.
        index: u32,
    },
    /// The chain ends before the size the superblock gives.
    Short {
        /// Blocks found.
        found: u64,
        /// Blocks the superblock gives.
        expected: u64,
    },
    /// The image has no end marker.
    NoImageEnd,
}

impl fmt::Display for CheckpointDamage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutsideData { index } => {
                write!(f, "frame {index} lies outside the data area")
            }
            Self::Loops { index } => write!(
                f,
                "the chain loops at frame {index} or is longer than the superblock says"
            ),
            Self::Header { index } => write!(f, "frame {index}'s header is invalid"),
            Self::Foreign { index } => {
                write!(f, "frame {index} does not belong to this checkpoint")
            }
            Self::Checksum { index } => write!(f, "frame {index}'s checksum mismatches"),
            Self::Short { found, expected } => write!(
                f,
                "the chain holds {found} blocks, shorter than the {expected} the superblock says"
            ),
            Self::NoImageEnd => write!(f, "the image has no end marker"),
        }
    }
}

/// A record that is malformed, or holds a value past the engine's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordDamage {
    /// The record ends early.
    Truncated,
    /// The record's type is unknown.
    Tag(u8),
    /// An inode number is 0 or past the largest.
    InodeNumber(u64),
    /// A page index is past the largest file.
    PageIndex {
        /// The file.
        ino: u64,
        /// The index.
        page: u64,
    },
    /// A name's length is 0 or past the longest.
    NameLength(u16),
    /// A name is not UTF-8, holds NUL or `/`, or is `.` or `..`.
    NameBytes,
    /// Inode `ino`'s kind code is unknown.
    Kind {
        /// The inode.
        ino: u64,
        /// The code.
        code: u8,
    },
    /// Inode `ino`'s permission bits are past `0o7777`.
    Perm {
        /// The inode.
        ino: u64,
        /// The bits.
        perm: u16,
    },
    /// Inode `ino`'s parent is out of range, or set on a non-directory.
    Parent {
        /// The inode.
        ino: u64,
        /// The parent.
        parent: u64,
    },
    /// Inode `ino`'s size is past the largest file, or a directory has a
    /// size.
    Size {
        /// The inode.
        ino: u64,
        /// The size.
        size: u64,
    },
    /// Inode `ino`'s extent count runs past the record's end.
    ExtentCount {
        /// The inode.
        ino: u64,
        /// The count.
        count: u32,
    },
    /// Inode `ino` has an extent out of range (empty, past the largest
    /// file, or past the largest block number).
    ExtentRange {
        /// The inode.
        ino: u64,
        /// The extent's first file block.
        file_block: u64,
    },
    /// Inode `ino`'s extents overlap or are out of order.
    ExtentOrder {
        /// The inode.
        ino: u64,
        /// The first file block out of order.
        file_block: u64,
    },
    /// Symbolic link `ino`'s target is empty, too long, not UTF-8, holds
    /// NUL, or mismatches the size.
    Target {
        /// The link.
        ino: u64,
    },
    /// A rename's flags byte is neither 0 nor 1.
    RenameFlags(u8),
    /// Inode `ino`'s extended-attribute record has a name or value
    /// outside [`persist::xattr`](crate::persist::xattr)'s rules, or an
    /// operation byte that is neither 0 nor 1.
    Xattr {
        /// The inode.
        ino: u64,
    },
}

impl fmt::Display for RecordDamage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => write!(f, "truncated"),
            Self::Tag(t) => write!(f, "unknown record type {t}"),
            Self::InodeNumber(ino) => write!(f, "inode number {ino} is out of range"),
            Self::PageIndex { ino, page } => {
                write!(f, "inode {ino}: page {page} is past the largest file")
            }
            Self::NameLength(len) => write!(f, "name length {len} is out of range"),
            Self::NameBytes => write!(f, "a name is not UTF-8, contains NUL or '/', or is . or .."),
            Self::Kind { ino, code } => write!(f, "inode {ino}: unknown kind {code}"),
            Self::Perm { ino, perm } => {
                write!(f, "inode {ino}: permission bits {perm:#o} are out of range")
            }
            Self::Parent { ino, parent } => {
                write!(f, "inode {ino}: parent {parent} is out of range")
            }
            Self::Size { ino, size } => write!(
                f,
                "inode {ino}: size {size} is past the largest file, or on a directory"
            ),
            Self::ExtentCount { ino, count } => {
                write!(f, "inode {ino}: {count} extents run past the record's end")
            }
            Self::ExtentRange { ino, file_block } => write!(
                f,
                "inode {ino}: the extent at file block {file_block} is out of range"
            ),
            Self::ExtentOrder { ino, file_block } => write!(
                f,
                "inode {ino}: the extent at file block {file_block} overlaps or is out of order"
            ),
            Self::Target { ino } => write!(
                f,
                "symbolic link {ino}: the target is empty, too long, not UTF-8, holds NUL \
                 or mismatches the size"
            ),
            Self::RenameFlags(x) => write!(f, "rename flags {x} are out of range"),
            Self::Xattr { ino } => write!(
                f,
                "inode {ino}: an extended attribute's name, value or operation is out of range"
            ),
        }
    }
}

/// A record that contradicts the metadata before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplayDamage {
    /// A record names inode `ino`, which does not exist.
    NoInode(u64),
    /// A link into `parent`, which is no directory, or over one of its
    /// entries.
    LinkInto {
        /// The directory.
        parent: u64,
        /// The inode linked.
        ino: u64,
    },
    /// An unlink, rename or exchange of an entry of `dir` that does not
    /// exist.
    NoEntry {
        /// The directory.
        dir: u64,
    },
    /// A rename from or to something that is no directory.
    RenameNotDir {
        /// Source directory.
        from: u64,
        /// Destination directory.
        to: u64,
    },
    /// A free of inode `ino`, which still has links (or is the root).
    FreeLinked {
        /// The inode.
        ino: u64,
        /// Its links.
        nlink: u32,
    },
    /// An image end outside a checkpoint's image.
    ImageEnd,
    /// A checkpoint image names an entry of `parent` twice.
    ImageEntryTwice {
        /// The directory.
        parent: u64,
    },
    /// A checkpoint image holds a record other than an inode or an entry.
    ImageRecord,
    /// Data for page `page` of `ino`, which is no file or does not map
    /// the page to `block`.
    DataUnmapped {
        /// The file.
        ino: u64,
        /// The page.
        page: u64,
        /// The block the record names.
        block: u64,
    },
}

impl fmt::Display for ReplayDamage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoInode(ino) => write!(f, "a record names inode {ino}, which does not exist"),
            Self::LinkInto { parent, ino } => write!(
                f,
                "a link of inode {ino} into inode {parent}, which is no directory, \
                 or over an entry"
            ),
            Self::NoEntry { dir } => write!(f, "a record names an entry directory {dir} lacks"),
            Self::RenameNotDir { from, to } => write!(
                f,
                "a rename from inode {from} to inode {to}, one of which is no directory"
            ),
            Self::FreeLinked { ino, nlink } => {
                write!(f, "a free of inode {ino}, which still has {nlink} links")
            }
            Self::ImageEnd => write!(f, "an image end outside an image"),
            Self::ImageEntryTwice { parent } => {
                write!(f, "an image names an entry of directory {parent} twice")
            }
            Self::ImageRecord => write!(f, "an image holds a record images never do"),
            Self::DataUnmapped { ino, page, block } => write!(
                f,
                "data for page {page} of inode {ino}, which does not map it to block {block}"
            ),
        }
    }
}
