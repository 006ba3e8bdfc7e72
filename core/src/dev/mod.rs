//! The block-device seam: everything the engine needs from storage.
//!
//! A device offers its geometry, an arena of DMA-capable page frames, and any
//! number of independent queues. Each engine session (one per thread or core)
//! owns one queue, so the submission path shares nothing with other threads.
//! Commands name frames by [`FrameId`]; the device moves data directly between
//! the medium and those frames, which are the page cache's own memory, so the
//! data path has no bounce buffers. Completion is by polling: a queue reports
//! finished commands only when [`DeviceQueue::poll`] is called.
//!
//! Implementations here: [`ram::RamDevice`] (no_std, memory-backed),
//! [`fault::FaultyDevice`] (wraps any device and fails commands on a plan) and,
//! with the `std` feature, [`file::FileDevice`] (a regular file via `pread`
//! and `pwrite`). The NVMe driver crate implements the same traits.
//! [`requests`] is the request table of a queue that splits requests into
//! pieces, shared by the NVMe queue and the volumes.

pub mod either;
pub mod fault;
#[cfg(feature = "std")]
pub mod file;
pub mod immediate;
pub mod ram;
pub mod requests;

use alloc::vec::Vec;

use crate::stats::{DeviceCounts, DeviceHealth};
use crate::units::{FrameId, Lba, Nanos, PAGE_SIZE};

/// Static facts about a device, read once at mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Logical block size in bytes: 512 or 4096.
    pub block_size: u32,
    /// Capacity in logical blocks.
    pub capacity: u64,
    /// Largest data transfer of one command, in bytes (a multiple of 4 KiB).
    pub max_transfer: u32,
    /// Commands one queue can have in flight.
    pub queue_depth: u32,
    /// A write with `fua` set is durable when it completes. Without it
    /// the engine follows each write that must be durable with a flush.
    pub fua: bool,
}

impl Geometry {
    /// Checks the invariants the engine relies on; devices report geometry
    /// from hardware, so it is validated rather than trusted.
    pub fn validate(&self) -> Result<(), DevError> {
        let bs_ok = self.block_size == 512 || self.block_size == 4096;
        let mt_ok =
            self.max_transfer >= PAGE_SIZE as u32 && self.max_transfer % PAGE_SIZE as u32 == 0;
        if !bs_ok || !mt_ok || self.queue_depth == 0 {
            return Err(DevError::BadGeometry);
        }
        Ok(())
    }
    /// Logical blocks per 4 KiB page.
    pub fn blocks_per_page(&self) -> u64 {
        PAGE_SIZE as u64 / u64::from(self.block_size)
    }
    /// Capacity in whole 4 KiB pages.
    pub fn capacity_pages(&self) -> u64 {
        self.capacity / self.blocks_per_page()
    }
    /// Largest number of 4 KiB frames one command may carry.
    #[inline]
    pub fn max_frames_per_command(&self) -> usize {
        (self.max_transfer as usize / PAGE_SIZE).max(1)
    }
    /// Checks a transfer of `frames` 4 KiB frames from `lba` (a read or
    /// write, see [`Command::validate`]): at least one frame, no more than
    /// one command carries, inside the device.
    #[inline]
    pub fn check_transfer(&self, lba: Lba, frames: usize) -> Result<(), DevError> {
        if frames == 0 || frames > self.max_frames_per_command() {
            return Err(DevError::InvalidRequest);
        }
        self.check_blocks(lba, frames as u64 * self.blocks_per_page())
    }
    /// Checks a span of `count` logical blocks from `lba`: not empty,
    /// inside the device.
    #[inline]
    pub fn check_blocks(&self, lba: Lba, count: u64) -> Result<(), DevError> {
        let end = lba.0.checked_add(count).ok_or(DevError::OutOfRange)?;
        if count == 0 {
            return Err(DevError::InvalidRequest);
        }
        if end > self.capacity {
            return Err(DevError::OutOfRange);
        }
        Ok(())
    }
}

/// One device command. Data commands move whole 4 KiB frames: a command with
/// `n` frames covers `n * blocks_per_page` logical blocks starting at `lba`.
#[derive(Clone, Copy, Debug)]
pub enum Command<'a> {
    /// Read blocks into frames.
    Read {
        /// First logical block.
        lba: Lba,
        /// Destination frames, in order.
        frames: &'a [FrameId],
    },
    /// Write frames to blocks.
    Write {
        /// First logical block.
        lba: Lba,
        /// Source frames, in order.
        frames: &'a [FrameId],
        /// Force unit access: durable when the command completes.
        fua: bool,
    },
    /// Make every completed write durable.
    Flush,
    /// Tell the device the blocks hold nothing worth keeping (trim).
    Deallocate {
        /// First logical block.
        lba: Lba,
        /// Number of logical blocks.
        blocks: u64,
    },
    /// Set blocks to zero without transferring data.
    WriteZeroes {
        /// First logical block.
        lba: Lba,
        /// Number of logical blocks.
        blocks: u64,
    },
}

/// A [`Command`] that owns its frame list, for a device or wrapper that
/// holds a command past `submit` (a backlog, a deferred execution).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnedCommand {
    /// [`Command::Read`].
    Read {
        /// First logical block.
        lba: Lba,
        /// Destination frames.
        frames: Vec<FrameId>,
    },
    /// [`Command::Write`].
    Write {
        /// First logical block.
        lba: Lba,
        /// Source frames.
        frames: Vec<FrameId>,
        /// Force unit access.
        fua: bool,
    },
    /// [`Command::Flush`].
    Flush,
    /// [`Command::Deallocate`].
    Deallocate {
        /// First logical block.
        lba: Lba,
        /// Number of blocks.
        blocks: u64,
    },
    /// [`Command::WriteZeroes`].
    WriteZeroes {
        /// First logical block.
        lba: Lba,
        /// Number of blocks.
        blocks: u64,
    },
}

impl OwnedCommand {
    /// A copy of `cmd`.
    pub fn of(cmd: &Command<'_>) -> OwnedCommand {
        match *cmd {
            Command::Read { lba, frames } => OwnedCommand::Read {
                lba,
                frames: frames.to_vec(),
            },
            Command::Write { lba, frames, fua } => OwnedCommand::Write {
                lba,
                frames: frames.to_vec(),
                fua,
            },
            Command::Flush => OwnedCommand::Flush,
            Command::Deallocate { lba, blocks } => OwnedCommand::Deallocate { lba, blocks },
            Command::WriteZeroes { lba, blocks } => OwnedCommand::WriteZeroes { lba, blocks },
        }
    }
    /// The command, borrowing the frame list.
    pub fn command(&self) -> Command<'_> {
        match self {
            OwnedCommand::Read { lba, frames } => Command::Read { lba: *lba, frames },
            OwnedCommand::Write { lba, frames, fua } => Command::Write {
                lba: *lba,
                frames,
                fua: *fua,
            },
            OwnedCommand::Flush => Command::Flush,
            OwnedCommand::Deallocate { lba, blocks } => Command::Deallocate {
                lba: *lba,
                blocks: *blocks,
            },
            OwnedCommand::WriteZeroes { lba, blocks } => Command::WriteZeroes {
                lba: *lba,
                blocks: *blocks,
            },
        }
    }
}

/// The kinds of command, for counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandKind {
    /// [`Command::Read`]
    Read,
    /// [`Command::Write`]
    Write,
    /// [`Command::Flush`]
    Flush,
    /// [`Command::Deallocate`]
    Deallocate,
    /// [`Command::WriteZeroes`]
    WriteZeroes,
}

impl Command<'_> {
    /// The command's kind.
    pub fn kind(&self) -> CommandKind {
        match self {
            Command::Read { .. } => CommandKind::Read,
            Command::Write { .. } => CommandKind::Write,
            Command::Flush => CommandKind::Flush,
            Command::Deallocate { .. } => CommandKind::Deallocate,
            Command::WriteZeroes { .. } => CommandKind::WriteZeroes,
        }
    }
    /// Bytes of data the command transfers.
    pub fn data_bytes(&self) -> u64 {
        match self {
            Command::Read { frames, .. } | Command::Write { frames, .. } => {
                (frames.len() * PAGE_SIZE) as u64
            }
            _ => 0,
        }
    }
    /// The logical blocks the command touches, as `(first, count)`.
    pub fn block_span(&self, geometry: &Geometry) -> Option<(Lba, u64)> {
        match *self {
            Command::Read { lba, frames } | Command::Write { lba, frames, .. } => {
                Some((lba, frames.len() as u64 * geometry.blocks_per_page()))
            }
            Command::Deallocate { lba, blocks } | Command::WriteZeroes { lba, blocks } => {
                Some((lba, blocks))
            }
            Command::Flush => None,
        }
    }
    /// Checks the command against the geometry: in range, not empty, not
    /// larger than the maximum transfer.
    pub fn validate(&self, geometry: &Geometry) -> Result<(), DevError> {
        match *self {
            Command::Read { lba, frames } | Command::Write { lba, frames, .. } => {
                geometry.check_transfer(lba, frames.len())
            }
            Command::Deallocate { lba, blocks } | Command::WriteZeroes { lba, blocks } => {
                geometry.check_blocks(lba, blocks)
            }
            Command::Flush => Ok(()),
        }
    }
}

/// Identifies a submitted command within its queue until it completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag(pub u32);

/// A finished command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The tag `submit` returned.
    pub tag: Tag,
    /// What happened.
    pub result: Result<(), DevError>,
}

/// Device errors, on submission or in a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DevError {
    /// The queue has no free slot; poll and try again.
    QueueFull,
    /// The command addresses blocks past the end of the device.
    OutOfRange,
    /// The command is malformed (empty, too large, bad frame).
    InvalidRequest,
    /// The medium could not be read or written.
    Media,
    /// The command did not complete in time.
    Timeout,
    /// The controller failed or was reset while the command was in flight.
    ControllerFailed,
    /// The device reported geometry the engine cannot use.
    BadGeometry,
    /// No more queues can be created.
    NoQueues,
    /// A frame copy names a frame that does not exist or a range that does
    /// not lie inside one frame: a bug in the caller, reported rather than
    /// clipped.
    FrameRange,
    /// Any other device status, kept as the device's raw code.
    Status(u16),
}

impl core::fmt::Display for DevError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DevError::QueueFull => write!(f, "device queue full"),
            DevError::OutOfRange => write!(f, "block address out of range"),
            DevError::InvalidRequest => write!(f, "invalid device request"),
            DevError::Media => write!(f, "media error"),
            DevError::Timeout => write!(f, "device command timed out"),
            DevError::ControllerFailed => write!(f, "controller failed"),
            DevError::BadGeometry => write!(f, "device reported unusable geometry"),
            DevError::NoQueues => write!(f, "no device queues left"),
            DevError::FrameRange => write!(f, "frame or range outside the frame arena"),
            DevError::Status(code) => write!(f, "device status {code:#06x}"),
        }
    }
}

impl core::error::Error for DevError {}

/// DMA-capable page frames owned by a device.
///
/// The page cache copies user data in and out through these methods; the
/// device reads and writes the same memory when it executes commands.
/// Concurrent `read` and `write` of one frame must be memory-safe and each
/// call must see or make the frame's bytes as one unit (a frame-level lock or
/// equivalent). A frame that does not exist, or a range that does not lie
/// inside one frame, is [`DevError::FrameRange`]: never clipped, never a
/// panic, and nothing is copied.
pub trait FrameArena: Send + Sync {
    /// Number of frames.
    fn frame_count(&self) -> u32;
    /// Copies `dst.len()` bytes out of `frame`, starting at `offset`.
    fn read(&self, frame: FrameId, offset: usize, dst: &mut [u8]) -> Result<(), DevError>;
    /// Copies `src` into `frame` at `offset`.
    fn write(&self, frame: FrameId, offset: usize, src: &[u8]) -> Result<(), DevError>;
    /// Sets `len` bytes of `frame` from `offset` to `byte`.
    fn fill(&self, frame: FrameId, offset: usize, len: usize, byte: u8) -> Result<(), DevError>;
}

/// The byte range `[offset, offset + len)` of a page frame, if `frame` is
/// one of `count` frames and the range lies inside it: the one check every
/// [`FrameArena`] makes.
#[inline]
pub fn frame_span(
    count: u32,
    frame: FrameId,
    offset: usize,
    len: usize,
) -> Result<core::ops::Range<usize>, DevError> {
    let end = offset.checked_add(len).ok_or(DevError::FrameRange)?;
    if frame.0 >= count || end > PAGE_SIZE {
        return Err(DevError::FrameRange);
    }
    Ok(offset..end)
}

/// One submission/completion queue pair. Owned by one session; `&mut self`
/// everywhere, so nothing on this path needs a lock.
pub trait DeviceQueue: Send {
    /// Starts a command. `Err(QueueFull)` means poll and retry; other errors
    /// mean the command was refused and will never complete.
    fn submit(&mut self, command: &Command<'_>) -> Result<Tag, DevError>;
    /// Reaps at most `max` finished commands, handing each to `done`, and
    /// returns how many were reaped. `now` drives command timeouts.
    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize;
    /// Commands submitted and not yet reaped.
    fn in_flight(&self) -> usize;
}

/// A block device the engine can mount.
pub trait BlockDevice: Send + Sync + 'static {
    /// The queue type this device hands out.
    type Queue: DeviceQueue;
    /// The device's DMA frame arena.
    type Frames: FrameArena;
    /// The device's geometry.
    fn geometry(&self) -> Geometry;
    /// The frames the page cache lives in. Their number is fixed when the
    /// device is set up (like reserving hugepages for DMA).
    fn frames(&self) -> &Self::Frames;
    /// A new independent queue.
    fn open_queue(&self) -> Result<Self::Queue, DevError>;
    /// What the device's driver counted of its own recoveries (resets,
    /// timeouts, reconnects). A device with no controller has none; a
    /// wrapper passes its device's on.
    fn health(&self) -> DeviceHealth {
        DeviceHealth::default()
    }
    /// For a volume: each leg's commands and errors by position, as the
    /// volume's queues counted them (summed on the call, never on the
    /// I/O path), with the leg's own [`health`](Self::health). A device
    /// made of no other devices has none; a wrapper passes its device's on.
    fn leg_counts(&self) -> Vec<DeviceCounts> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_and_block_spans_are_checked_against_the_geometry() {
        let g = Geometry {
            block_size: 512,
            capacity: 64,
            max_transfer: 8192,
            queue_depth: 4,
            fua: false,
        };
        assert_eq!(g.check_transfer(Lba(0), 2), Ok(()));
        assert_eq!(g.check_transfer(Lba(56), 1), Ok(()), "the last page");
        assert_eq!(g.check_transfer(Lba(57), 1), Err(DevError::OutOfRange));
        assert_eq!(g.check_transfer(Lba(0), 0), Err(DevError::InvalidRequest));
        assert_eq!(g.check_transfer(Lba(0), 3), Err(DevError::InvalidRequest));
        assert_eq!(g.check_blocks(Lba(u64::MAX), 1), Err(DevError::OutOfRange));
        assert_eq!(g.check_blocks(Lba(0), 0), Err(DevError::InvalidRequest));
        let frames = [FrameId(0); 2];
        let write = Command::Write {
            lba: Lba(50),
            frames: &frames,
            fua: false,
        };
        assert_eq!(write.validate(&g), Err(DevError::OutOfRange));
        let trim = Command::Deallocate {
            lba: Lba(60),
            blocks: 4,
        };
        assert_eq!(trim.validate(&g), Ok(()));
        assert_eq!(Command::Flush.validate(&g), Ok(()));
    }
}
