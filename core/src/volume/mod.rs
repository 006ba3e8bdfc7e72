//! Volumes: block devices made of other block devices (legs).
//!
//! - [`Stripe`]: RAID-0. The volume's blocks are dealt to the legs in
//!   chunks, round robin; a request is split at chunk boundaries and every
//!   leg's share is submitted before any completion is awaited, so the legs
//!   work in parallel. Capacity is the number of legs times the smallest
//!   leg, rounded down to whole chunks.
//! - [`Mirror`]: RAID-1. Writes, flushes and trims go to every leg in sync;
//!   reads to one of them, and to another if that one fails. A leg that
//!   fails a write or flush that another leg completed is dropped; a leg
//!   that comes back is copied from the others (resync) while writes go on,
//!   and serves reads only once it holds everything. A small header at the
//!   end of each leg records which legs are in sync (`header`), so that
//!   after a crash only legs known to be in sync are read.
//!
//! **The legs share one frame arena.** The page cache lives in the
//! device's frames and commands name frames, not buffers (`crate::dev`), so
//! a volume passes each command's frames straight to its legs: no copy.
//! That needs every leg to reach the same frames: RAM and file legs move
//! data through any arena ([`crate::dev::ram::RamDevice::with_arena`]),
//! NVMe controllers through DMA memory they can all address (one IOVA
//! space). [`same_arena`] checks it when a volume is put together. Legs of
//! different kinds are one type through [`crate::dev::either::Either`].
//!
//! Submission takes no lock shared with other queues: each volume queue
//! owns one queue on every leg ([`fanout`]). The mirror's routing reads a
//! few atomics; its rare work (membership changes, header writes, resync)
//! runs in a control section that whichever queue polls next enters with
//! a `try_lock`, so nothing waits for a thread that is not there.
//!
//! Each fanout counts the commands it sends to each leg and the leg's
//! errors in a block of its own (`tally`); `BlockDevice::leg_counts` sums
//! the blocks when `pollfs stat` asks.

mod fanout;
pub mod header;
pub mod mirror;
pub mod split;
mod stripe;
mod tally;

pub use mirror::{EventHook, LegState, Mirror, MirrorEvent, MirrorStatus, OpenOptions};
pub use stripe::{Stripe, StripeQueue};

use core::fmt;

use crate::dev::{BlockDevice, DevError};

/// Most legs a volume has (the mirror header has a slot for each).
pub const MAX_LEGS: usize = 8;

/// Why a volume could not be put together or changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum VolumeError {
    /// A volume needs at least one leg (a mirror, two to be worth it).
    NoLegs,
    /// More than [`MAX_LEGS`] legs.
    TooManyLegs,
    /// The legs do not share one frame arena.
    ArenasDiffer,
    /// The legs have different logical block sizes.
    BlockSizesDiffer,
    /// The chunk size is not a non-zero multiple of 4 KiB.
    ChunkSize,
    /// The legs are too small to hold a chunk (stripe) or the header and a
    /// page of data (mirror).
    TooSmall,
    /// The legs' arena has too few frames for the mirror's own I/O and a
    /// page cache.
    TooFewFrames,
    /// A mirror leg does not offer Force Unit Access: the headers' commit
    /// rule relies on a header write being durable when it completes.
    NoFua {
        /// The leg, by position.
        leg: usize,
    },
    /// A leg refused a command or failed one the volume needed.
    Leg {
        /// The leg, by position.
        leg: usize,
        /// What it said.
        error: DevError,
    },
    /// A leg has no mirror header (or neither copy is intact).
    NotAMirror {
        /// The leg, by position.
        leg: usize,
    },
    /// A leg's header was written by a newer format of pollfs than this
    /// one reads.
    NewerFormat {
        /// The leg, by position.
        leg: usize,
        /// The header's format version.
        version: u32,
    },
    /// A leg's header belongs to another mirror, or names another position
    /// or shape than the others.
    Foreign {
        /// The leg, by position.
        leg: usize,
        /// Which field disagrees.
        field: &'static str,
    },
    /// No leg is known to hold the mirror's data.
    NoLegInSync,
    /// The leg named is not one of the mirror's.
    NoSuchLeg,
    /// The operation does not apply to the leg in its current state (a
    /// rejoin of a leg in sync, a preferred source that is not in sync).
    LegState {
        /// The leg, by position.
        leg: usize,
        /// The state it is in.
        state: LegState,
    },
    /// The mirror was closed, or is opened read-only.
    ReadOnly,
}

impl VolumeError {
    /// The Linux errno that says what went wrong, for doors that speak
    /// errno (the C library); written here, where every kind is matched
    /// without a catch-all, so a new kind needs its errno to compile.
    pub fn errno(&self) -> i32 {
        // Linux values, written out so that the `no_std` build has them.
        const EIO: i32 = 5;
        const EROFS: i32 = 30;
        const EINVAL: i32 = 22;
        const ENOSPC: i32 = 28;
        const ENOENT: i32 = 2;
        const EUCLEAN: i32 = 117;
        const EOPNOTSUPP: i32 = 95;
        match self {
            VolumeError::NoLegs
            | VolumeError::TooManyLegs
            | VolumeError::ArenasDiffer
            | VolumeError::BlockSizesDiffer
            | VolumeError::ChunkSize
            | VolumeError::TooFewFrames
            | VolumeError::NoFua { .. }
            | VolumeError::Foreign { .. }
            | VolumeError::LegState { .. } => EINVAL,
            VolumeError::TooSmall => ENOSPC,
            // A leg failed a command: an I/O error.
            VolumeError::Leg { .. } => EIO,
            // What the legs hold is not a mirror this build can read.
            VolumeError::NotAMirror { .. } | VolumeError::NoLegInSync => EUCLEAN,
            VolumeError::NewerFormat { .. } => EOPNOTSUPP,
            VolumeError::NoSuchLeg => ENOENT,
            VolumeError::ReadOnly => EROFS,
        }
    }
}

impl fmt::Display for VolumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VolumeError::NoLegs => write!(f, "a volume needs legs"),
            VolumeError::TooManyLegs => write!(f, "a volume has at most {MAX_LEGS} legs"),
            VolumeError::ArenasDiffer => write!(
                f,
                "the legs do not share one frame arena (each leg must reach the page cache's frames)"
            ),
            VolumeError::BlockSizesDiffer => write!(f, "the legs have different block sizes"),
            VolumeError::ChunkSize => write!(f, "the chunk size must be a multiple of 4 KiB"),
            VolumeError::TooSmall => write!(f, "the legs are too small"),
            VolumeError::TooFewFrames => write!(
                f,
                "the legs' frame arena is too small for the mirror's own I/O and a page cache"
            ),
            VolumeError::NoFua { leg } => write!(
                f,
                "leg {leg} offers no Force Unit Access, which a mirror's headers need"
            ),
            VolumeError::Leg { leg, error } => write!(f, "leg {leg}: {error}"),
            VolumeError::NotAMirror { leg } => write!(f, "leg {leg} holds no mirror header"),
            VolumeError::NewerFormat { leg, version } => write!(
                f,
                "leg {leg}'s mirror header is format {version}, newer than this pollfs reads \
                 (up to {}): open the mirror with a newer pollfs",
                header::VERSION
            ),
            VolumeError::Foreign { leg, field } => write!(
                f,
                "leg {leg} belongs to another mirror or position ({field} differs)"
            ),
            VolumeError::NoLegInSync => write!(f, "no leg is known to be in sync"),
            VolumeError::NoSuchLeg => write!(f, "no such leg"),
            VolumeError::LegState { leg, state } => write!(f, "leg {leg} is {state}"),
            VolumeError::ReadOnly => write!(f, "the mirror is closed or read-only"),
        }
    }
}

impl core::error::Error for VolumeError {}

/// True if every leg reads and writes the very same frame arena (one
/// object, so a frame id means one page of memory on every leg).
pub fn same_arena<D: BlockDevice>(legs: &[D]) -> bool {
    match legs.first() {
        Some(first) => legs
            .iter()
            .all(|l| core::ptr::eq(l.frames(), first.frames())),
        None => true,
    }
}

/// The checks every volume makes of its legs: some, not too many, one
/// arena, one block size. Returns the block size.
fn check_legs<D: BlockDevice>(legs: &[D]) -> Result<u32, VolumeError> {
    let first = legs.first().ok_or(VolumeError::NoLegs)?;
    if legs.len() > MAX_LEGS {
        return Err(VolumeError::TooManyLegs);
    }
    if !same_arena(legs) {
        return Err(VolumeError::ArenasDiffer);
    }
    let block_size = first.geometry().block_size;
    if legs.iter().any(|l| l.geometry().block_size != block_size) {
        return Err(VolumeError::BlockSizesDiffer);
    }
    Ok(block_size)
}
