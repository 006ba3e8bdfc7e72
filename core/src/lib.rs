//! pollfs-core: a file engine over a polled block device, with no kernel and
//! no OS underneath (`no_std` + `alloc`).
//!
//! Layers, from the user down:
//!
//! - [`fs`]: the file API. [`Fs`] is a mounted filesystem: a tree of
//!   directories, files, symbolic and hard links with modes, owners and
//!   times (`create`, `mkdir`, `rename`, `read_dir`, `set_attr`, ...). A
//!   [`File`] is an owned handle (`Clone + Send + Sync`): `read_at`,
//!   `write_at`, `set_len`, `punch_hole`, `allocate`, `sync_data`,
//!   `sync_all`. Each operation runs in a [`Session`] (one device queue,
//!   one operation at a time), lent to the calling thread by the mount or
//!   passed explicitly. Reads take no file lock; writes inside EOF take
//!   only an extent lock; size changes take the inode lock and drain
//!   writers.
//! - [`cache`]: the page cache. Slots are the device's DMA frames; reads are
//!   optimistic (state-word version checks), writers pin, CLOCK evicts,
//!   readahead and writeback batch pages into large device commands.
//! - [`lock`]: awaitable byte-range locks with FIFO fairness, and the
//!   lock-order check.
//! - [`space`]: block allocator and per-file extent maps.
//! - [`persist`]: the on-disk format, the record codec, the namespace
//!   [`persist::tree::Tree`] that live operations and replay both apply
//!   records to, the journal (group commit, small syncs' data in the log,
//!   checkpoints; an in-memory journal for [`Fs::new`]), recovery and fsck
//!   (`Fs::format`, `Fs::mount`, `persist::check`, `persist::repair`).
//! - [`dev`]: the block-device seam (geometry, DMA frames, polled queues,
//!   one request table for queues and volumes) with RAM, file-backed and
//!   fault-injecting devices.
//! - [`volume`]: block devices made of other block devices: striping
//!   (RAID-0) and mirroring (RAID-1) over legs that share one frame arena.
//! - [`sync`]: spin locks for short sections, wait queues for await points,
//!   and `block_on` for synchronous callers.
//! - [`rng`]: the one seedable pseudo-random generator (tests, the bench,
//!   emulated faults).
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
#[cfg(pollfs_mutants)]
pub mod mutants;
// The planted bugs are for the test harness's debug builds only: a
// `--cfg pollfs_mutants` leaking into an optimised build through RUSTFLAGS
// stops the build instead of shipping them.
#[cfg(all(pollfs_mutants, not(debug_assertions)))]
compile_error!("cfg(pollfs_mutants) plants bugs: only debug builds (`just mutants`) take it");
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
    Allocate, Config, Created, DirEntry, File, Fs, HeldDir, InodeId, InvariantError, Kind,
    Metadata, NewInode, RenameFlags, Session, SetAttr, StatFs, XattrMode, MAX_FILE_SIZE,
    MAX_NAME_LEN,
};
pub use stats::{DeviceCounts, DeviceHealth, Stats};
