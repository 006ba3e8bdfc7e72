//! An I/O queue: turns engine [`Command`]s into NVMe commands on one queue
//! pair and reaps them, with timeouts, abort, retry and reset recovery.
//!
//! One engine request may become several NVMe commands (a transfer beyond
//! MDTS, or a trim or zero range beyond one command's block count); it is
//! handed back as one [`Completion`] when the last of them finishes, with
//! the first error any of them hit. Large trim/zero ranges are issued
//! piecewise as command ids free up, so they never need more ids than the
//! queue has.
//!
//! Time comes only from `poll(now, ..)`. A command's deadline is armed at
//! the first poll after it was submitted; deadlines and CSTS are checked
//! every `health_interval`. A timed-out command is aborted; if it is still
//! outstanding `abort_timeout` later, the controller is reset. After a
//! reset the queue re-creates itself and resubmits everything it had in
//! flight (bounded by `max_retries`) except the command that timed out.

mod issue;
mod recovery;
mod requests;

use alloc::collections::VecDeque;

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use requests::Requests;

use pollfs_core::dev::{Command, Completion, DevError, DeviceQueue, Geometry, Tag};
use pollfs_core::units::{FrameId, Nanos};

use crate::controller::{Controller, MPS};
use crate::device::NvmeFrames;
use crate::error::DriverError;
use crate::hal::{DmaAllocator, Registers};
use crate::prp;
use crate::queue::{CidPool, QueuePair};
use crate::spec::command::{DsmRange, SubmissionEntry, SQE_SIZE};
use crate::spec::completion::CQE_SIZE;

/// Where the device's frame arena sits on the bus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameMap {
    /// Bus address of frame 0; frames are contiguous 4 KiB pages.
    pub base: u64,
    /// Number of frames.
    pub count: u32,
}

impl FrameMap {
    /// Bus address of `frame`, if it exists.
    pub fn iova(&self, frame: FrameId) -> Option<u64> {
        (frame.0 < self.count).then(|| self.base + u64::from(frame.0) * MPS as u64)
    }
}

/// Counters, for tests and tools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// NVMe commands submitted (including resubmissions).
    pub commands: u64,
    /// Resubmissions after an error status or a reset.
    pub retries: u64,
    /// Commands that hit their deadline.
    pub timeouts: u64,
    /// Protocol violations seen from the device.
    pub protocol_errors: u64,
    /// Times this queue re-created itself after a controller reset.
    pub resyncs: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    sqe: SubmissionEntry,
    tag: u32,
    deadline: Option<Nanos>,
    abort_by: Option<Nanos>,
    retries: u8,
    timed_out: bool,
}

/// Trim or zero blocks not yet issued.
#[derive(Clone, Copy, Debug)]
struct Rest {
    zeroes: bool,
    lba: u64,
    blocks: u64,
}

#[derive(Debug)]
struct Request {
    outstanding: u32,
    error: Option<DevError>,
    rest: Option<Rest>,
}

enum Payload<'a> {
    None,
    Frames(&'a [FrameId]),
    Range(DsmRange),
}

/// Most blocks one Write Zeroes (16-bit NLB) can cover.
const MAX_ZERO_BLOCKS: u64 = 1 << 16;

/// An I/O queue pair owned by one engine session.
pub struct NvmeQueue<R: Registers + 'static, A: DmaAllocator + 'static> {
    ctrl: Arc<Controller<R, A>>,
    frames: FrameMap,
    /// Keeps the frame memory alive while commands may still DMA into it.
    _arena: Arc<NvmeFrames<A::Region>>,
    geometry: Geometry,
    qp: QueuePair<A::Region>,
    cids: CidPool,
    slots: Vec<Slot>,
    scratch: A::Region,
    list_pages: usize,
    chunk_frames: usize,
    requests: Requests,
    with_rest: VecDeque<u32>,
    unarmed: Vec<u16>,
    done: VecDeque<Completion>,
    generation: u64,
    next_scan: Nanos,
    pages: Vec<u64>,
    lists: Vec<u64>,
    stats: QueueStats,
}

impl<R: Registers, A: DmaAllocator> core::fmt::Debug for NvmeQueue<R, A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NvmeQueue")
            .field("qid", &self.qp.qid())
            .field("in_flight", &self.cids.in_use())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<R: Registers + 'static, A: DmaAllocator + 'static> NvmeQueue<R, A> {
    /// Creates an I/O queue pair on the controller.
    pub fn open(
        ctrl: Arc<Controller<R, A>>,
        arena: Arc<NvmeFrames<A::Region>>,
        geometry: Geometry,
    ) -> Result<Self, DriverError> {
        let frames = arena.map();
        if ctrl.is_dead() {
            return Err(DriverError::Dead);
        }
        let info = *ctrl.info();
        let entries = info.io_entries;
        let n = usize::from(entries);
        let bpp = geometry.blocks_per_page().max(1) as usize;
        let chunk_frames = (info.mdts_bytes as usize / MPS)
            .min(MAX_ZERO_BLOCKS as usize / bpp)
            .min(geometry.max_frames_per_command())
            .max(1);
        let list_pages = prp::list_pages_needed(chunk_frames, MPS).max(1);
        let capacity = entries - 1;
        let dma = ctrl.dma();
        let sq = dma.alloc(n * SQE_SIZE)?;
        let cq = dma.alloc(n * CQE_SIZE)?;
        let scratch = dma.alloc(usize::from(capacity) * list_pages * MPS)?;
        let qid = ctrl.alloc_qid()?;
        let generation = ctrl.generation();
        let qp = match QueuePair::new(qid, entries, sq, cq, info.cap.doorbell_stride()) {
            Ok(qp) => qp,
            Err(e) => {
                ctrl.free_qid(qid);
                return Err(e.into());
            }
        };
        if let Err(e) = ctrl.create_io_queue(&qp) {
            ctrl.free_qid(qid);
            return Err(e);
        }
        Ok(NvmeQueue {
            ctrl,
            frames,
            _arena: arena,
            geometry,
            qp,
            cids: CidPool::new(capacity),
            slots: vec![Slot::default(); usize::from(capacity)],
            scratch,
            list_pages,
            chunk_frames,
            requests: Requests::default(),
            with_rest: VecDeque::new(),
            unarmed: Vec::new(),
            done: VecDeque::new(),
            generation,
            next_scan: Nanos(0),
            pages: Vec::with_capacity(chunk_frames),
            lists: Vec::with_capacity(list_pages),
            stats: QueueStats::default(),
        })
    }

    /// This queue's id on the controller.
    pub fn qid(&self) -> u16 {
        self.qp.qid()
    }
    /// Counters.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }
    /// Most 4 KiB frames one NVMe command carries on this queue.
    pub fn frames_per_command(&self) -> usize {
        self.chunk_frames
    }
    /// Command ids this queue has (its depth).
    pub fn depth(&self) -> usize {
        self.cids.capacity()
    }
}

impl<R: Registers + 'static, A: DmaAllocator + 'static> DeviceQueue for NvmeQueue<R, A> {
    fn submit(&mut self, command: &Command<'_>) -> Result<Tag, DevError> {
        self.ensure_live()?;
        command.validate(&self.geometry)?;
        let nsid = self.ctrl.config().nsid;
        let bpp = self.geometry.blocks_per_page();
        match *command {
            Command::Read { lba, frames } | Command::Write { lba, frames, .. } => {
                if frames.iter().any(|&f| self.frames.iova(f).is_none()) {
                    return Err(DevError::InvalidRequest);
                }
                let pieces = frames.len().div_ceil(self.chunk_frames);
                if pieces > self.cids.capacity() {
                    return Err(DevError::InvalidRequest);
                }
                if pieces > self.cids.available() {
                    return Err(DevError::QueueFull);
                }
                let tag = self.new_request(None);
                for (i, chunk) in frames.chunks(self.chunk_frames).enumerate() {
                    let slba = lba.0 + (i * self.chunk_frames) as u64 * bpp;
                    let blocks = (chunk.len() as u64 * bpp) as u32;
                    let sqe = match *command {
                        Command::Write { fua, .. } => {
                            SubmissionEntry::write(nsid, slba, blocks, fua)
                        }
                        _ => SubmissionEntry::read(nsid, slba, blocks),
                    };
                    if let Err(e) = self.issue(tag, sqe, Payload::Frames(chunk)) {
                        if let Some(e) = self.abandon(tag, e) {
                            return Err(e);
                        }
                        break;
                    }
                }
                Ok(Tag(tag))
            }
            Command::Flush => {
                if self.cids.available() == 0 {
                    return Err(DevError::QueueFull);
                }
                let tag = self.new_request(None);
                if let Err(e) = self.issue(tag, SubmissionEntry::flush(nsid), Payload::None) {
                    if let Some(e) = self.abandon(tag, e) {
                        return Err(e);
                    }
                }
                Ok(Tag(tag))
            }
            Command::Deallocate { lba, blocks } | Command::WriteZeroes { lba, blocks } => {
                let ident = &self.ctrl.info().identify;
                let zeroes = matches!(command, Command::WriteZeroes { .. });
                if zeroes && !ident.supports_write_zeroes() {
                    return Err(DevError::InvalidRequest);
                }
                if self.cids.available() == 0 {
                    return Err(DevError::QueueFull);
                }
                // Deallocate is advisory; a controller without DSM simply
                // keeps the blocks.
                let rest = (zeroes || ident.supports_dsm()).then_some(Rest {
                    zeroes,
                    lba: lba.0,
                    blocks,
                });
                let tag = self.new_request(rest);
                self.pump();
                self.maybe_complete(tag);
                Ok(Tag(tag))
            }
        }
    }

    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        self.ctrl.regs().tick(now);
        if self.ctrl.is_dead() {
            self.fail_all(DevError::ControllerFailed);
        } else {
            if self.generation != self.ctrl.generation() {
                self.resync();
            }
            if self.reap().is_err() {
                self.stats.protocol_errors += 1;
                self.recover();
            }
            self.pump();
            let resyncs = self.stats.resyncs;
            self.check_timeouts(now);
            // Commands resubmitted by a recovery may already have completed.
            if self.stats.resyncs != resyncs && self.reap().is_err() {
                self.stats.protocol_errors += 1;
                self.recover();
            }
        }
        let mut n = 0;
        while n < max {
            let Some(c) = self.done.pop_front() else {
                break;
            };
            self.requests.release(c.tag.0);
            done(c);
            n += 1;
        }
        n
    }

    fn in_flight(&self) -> usize {
        self.requests.len() + self.done.len()
    }
}

impl<R: Registers + 'static, A: DmaAllocator + 'static> Drop for NvmeQueue<R, A> {
    fn drop(&mut self) {
        let qid = self.qp.qid();
        if !self.ctrl.is_dead() && self.generation == self.ctrl.generation() {
            // Deleting the SQ makes the controller drop its commands; if
            // that fails the controller is reset so it forgets the rings
            // before their memory is freed.
            if self.ctrl.delete_io_queue(qid).is_err() {
                let _ = self.ctrl.reset(self.generation);
            }
        }
        self.ctrl.free_qid(qid);
    }
}
