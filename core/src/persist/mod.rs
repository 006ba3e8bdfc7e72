//! Durability: the on-disk format, the metadata log, checkpoints and
//! recovery.
//!
//! Data blocks are written in place. Metadata lives in memory and reaches
//! the device two ways: the log, where a commit appends the records of the
//! changes staged since the last one (namespace changes as they were made,
//! an inode's whole attributes and extents built from the in-memory inode
//! at its sync, and, for a sync of a few pages, those pages' bytes, written
//! home later and retired by a later record); and checkpoints, images of
//! the durable metadata written as a
//! chain of frames into free data blocks when the log fills (or when a
//! commit is too large for one log write), after which a superblock write
//! moves the log's replay point. Recovery reads the newest valid
//! superblock, the checkpoint it names, and replays log writes while their
//! checksums, filesystem id and sequence numbers follow on, then makes
//! sure no intact later write lies beyond the end it found.
//!
//! - [`damage`]: what exactly is wrong with a damaged image.
//! - [`format`]: on-disk structures (layout, superblock, frames).
//! - [`record`]: log records and their encoding.
//! - [`tree`]: the namespace as a state machine that records change, held
//!   by the mounted filesystem and by replay alike.
//! - [`shadow`]: replay, the durable view a crash would leave (the tree
//!   plus each inode's attributes, extents and live data).
//! - [`problems`]: fsck's checks of that view.
//! - `metaio`: whole-block metadata I/O, one trait for mount and commits.
//! - `recover`: reading an image back (mount, fsck and repair share it).
//! - `journal`: where a filesystem's metadata changes go: its log's group
//!   commit (`journal/log.rs`) and checkpoints (`journal/checkpoint.rs`),
//!   or, for one in memory, nowhere (`journal/memory.rs`).
//! - `offline`: format, [`check`] and [`repair`].
//!
//! Ordering rules that make a crash safe (docs/design/format.md argues each):
//! a file's data is written and flushed before the log write that maps it
//! (and that log write is FUA); a freed block is not reused until a durable
//! record stops referencing it; a checkpoint is built from the durable
//! metadata, never from in-memory state, and its blocks are taken from
//! blocks nothing durable references.

pub mod damage;
pub mod format;
pub mod index;
mod journal;
mod metaio;
mod offline;
mod pages;
pub mod problems;
pub mod record;
mod recover;
pub mod shadow;
pub mod tree;
pub mod xattr;

pub(crate) use journal::{CommitEnv, DurableInode, Journal, LiveInode, Log, PendingFree, Written};
pub use metaio::run_polled;
pub(crate) use metaio::{chunks, MetaIo};
pub use offline::{check, repair, CheckReport, RepairReport};
pub(crate) use offline::{format_device, recover_for_mount};

/// Frames kept out of the page cache for metadata I/O.
pub const META_FRAMES: u32 = 32;
