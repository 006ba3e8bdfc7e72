//! Space management: the block allocator, per-file extent maps, and the
//! change records both emit so a log can make them durable.

mod allocator;
mod extent;

pub use allocator::{AllocError, Allocator};
pub use extent::{Extent, ExtentMap};

use crate::units::{BlockNo, InodeId};

/// One change to metadata, in the order the engine applied it. This is the
/// interface a metadata log records from: replaying these records on an
/// empty filesystem rebuilds names, sizes and extent maps.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetaChange<'a> {
    /// A file was created.
    Create {
        /// The new inode.
        ino: InodeId,
        /// Its name.
        name: &'a str,
    },
    /// A name was removed (the inode's blocks are freed when it is closed).
    Remove {
        /// The removed inode.
        ino: InodeId,
    },
    /// A file was renamed, replacing any file at `to`.
    Rename {
        /// The renamed inode.
        ino: InodeId,
        /// Its new name.
        to: &'a str,
    },
    /// The file's size changed.
    SetSize {
        /// The inode.
        ino: InodeId,
        /// The new size in bytes.
        size: u64,
    },
    /// File blocks `[file_block, file_block + len)` now live at `dev`.
    Map {
        /// The inode.
        ino: InodeId,
        /// First file block.
        file_block: u64,
        /// First device block.
        dev: BlockNo,
        /// Number of blocks.
        len: u64,
    },
    /// File blocks `[file_block, file_block + len)` became a hole.
    Unmap {
        /// The inode.
        ino: InodeId,
        /// First file block.
        file_block: u64,
        /// Number of blocks.
        len: u64,
    },
}

/// Receives every metadata change as it is applied (a log, or a test).
pub trait MetaSink: Send + Sync {
    /// Called once per change, in order, while the change is being applied.
    fn record(&self, change: &MetaChange<'_>);
}
