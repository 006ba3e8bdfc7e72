//! pollfs-core: a file engine over a polled block device, with no kernel and
//! no OS underneath (`no_std` + `alloc`).
//!
//! Layers, from the user down:
//!
//! - [`fs`]: the file API. [`Fs`] is a mounted filesystem (flat namespace);
//!   each thread opens a [`Session`], which owns one device queue, and opens
//!   [`File`]s through it: `read_at`, `write_at`, `set_len`, `punch_hole`,
//!   `sync_data`, `sync_all`. Reads take no file lock; writes inside EOF take
//!   only an extent lock; size changes take the inode lock and drain writers.
//! - [`cache`]: the page cache. Slots are the device's DMA frames; reads are
//!   optimistic (state-word version checks), writers pin, CLOCK evicts,
//!   readahead and writeback batch pages into large device commands.
//! - [`lock`]: awaitable byte-range locks with FIFO fairness, and the
//!   lock-order check.
//! - [`space`]: block allocator and per-file extent maps, emitting
//!   [`space::MetaChange`] records for a log.
//! - [`persist`]: the on-disk format, the metadata log with group commit,
//!   checkpoints and recovery (`Fs::format`, `Fs::mount`, `persist::check`).
//! - [`dev`]: the block-device seam (geometry, DMA frames, polled queues)
//!   with RAM, file-backed and fault-injecting devices.
//! - [`volume`]: block devices made of other block devices: striping
//!   (RAID-0) and mirroring (RAID-1) over legs that share one frame arena.
//! - [`sync`]: spin locks for short sections, wait queues for await points,
//!   and `block_on` for synchronous callers.
//! - [`rng`]: the one seedable pseudo-random generator, shared by the
//!   tests, the bench and the emulated controller's faults.
//!
//! Every operation that can wait is a future; the synchronous methods run
//! it with a polling loop. Nothing here uses `unsafe`.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(any(feature = "std", loom))]
extern crate std;

pub mod cache;
pub mod dev;
pub mod error;
pub mod fs;
#[cfg(feature = "std")]
pub mod hosted;
pub mod lock;
#[cfg(feature = "mutants")]
pub mod mutants;
pub mod persist;
pub mod rng;
pub mod space;
pub mod stats;
pub mod sync;
pub mod units;
pub mod volume;

pub use error::{Error, Result};
#[cfg(feature = "std")]
pub use fs::FileCursor;
pub use fs::{
    Allocate, Config, DirEntry, File, Fs, InvariantError, Kind, Metadata, NewInode, RenameFlags,
    Session, SetAttr, StatFs, XattrMode, MAX_FILE_SIZE, MAX_NAME_LEN, ROOT_INO,
};
pub use stats::Stats;
