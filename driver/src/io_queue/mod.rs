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
//! Command ids, the commands in flight and the requests they serve are one
//! table (`table.rs`): a request's tag is the id of its first command, so
//! the usual one-command request is allocated, checked on completion and
//! released in one entry.
//!
//! Time comes only from `poll(now, ..)`. Every `health_interval` a poll
//! scans the commands in flight: it arms the deadlines of those submitted
//! since the last scan, checks the armed ones, and reads CSTS; between
//! scans a poll does no per-command timeout work. A timed-out command is
//! aborted; if it is still outstanding `abort_timeout` later, the
//! controller is reset. After a reset the queue re-creates itself and
//! resubmits everything it had in flight (bounded by `max_retries`) except
//! the command that timed out.

mod issue;
mod recovery;
mod table;
#[cfg(test)]
mod tests;

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;

use pollfs_core::dev::{Command, Completion, DevError, DeviceQueue, FrameArena, Geometry, Tag};
use pollfs_core::units::Nanos;

use crate::controller::{Controller, Trouble, MPS};
use crate::error::DriverError;
use crate::spec::command::SubmissionEntry;
use crate::spec::completion::CompletionEntry;
use crate::transport::{Payload, QpairSpec, Transport};
use table::{HandBack, Table, Unissued};

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
    /// Completions that reported a failed end-to-end protection check
    /// (guard, application or reference tag), retries included.
    pub integrity_errors: u64,
}

/// Most blocks one Write Zeroes (16-bit NLB) can cover.
const MAX_ZERO_BLOCKS: u64 = 1 << 16;

/// An I/O queue pair owned by one engine session.
pub struct NvmeQueue<T: Transport> {
    ctrl: Arc<Controller<T>>,
    /// Keeps the frame memory alive while commands may still move data.
    arena: Arc<T::Frames>,
    geometry: Geometry,
    qp: T::Qpair,
    /// Command ids, the commands in flight and the requests they serve
    /// (the transport keeps the commands themselves, to send them again).
    table: Table,
    chunk_frames: usize,
    with_rest: VecDeque<u16>,
    /// Completions taken from the transport and not yet accounted.
    reaped: Vec<CompletionEntry>,
    generation: u64,
    next_scan: Nanos,
    stats: QueueStats,
    /// PRINFO of every Read and Write (Write Zeroes takes its PRACT bit
    /// alone), 0 on a namespace
    /// without protection information (whose commands then go out as
    /// before: one predictable branch, three instructions per command
    /// under `just io-cost`). On a protected one, the reference tag the
    /// controller checks (ILBRT) is the low 32 bits of the starting LBA.
    prinfo: u32,
}

impl<T: Transport> core::fmt::Debug for NvmeQueue<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NvmeQueue")
            .field("qid", &self.qid())
            .field("in_flight", &self.table.commands())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<T: Transport> NvmeQueue<T> {
    /// Creates an I/O queue pair on the controller.
    pub fn open(
        ctrl: Arc<Controller<T>>,
        arena: Arc<T::Frames>,
        geometry: Geometry,
    ) -> Result<Self, DriverError<T::Error>> {
        if ctrl.is_dead() {
            return Err(DriverError::Dead);
        }
        let info = *ctrl.info();
        let entries = info.io_entries;
        let prinfo = info.protection.map_or(0, |p| p.prinfo());
        let bpp = geometry.blocks_per_page().max(1) as usize;
        let chunk_frames = (info.mdts_bytes as usize / MPS)
            .min(MAX_ZERO_BLOCKS as usize / bpp)
            .min(geometry.max_frames_per_command())
            .max(1);
        let capacity = entries - 1;
        let qid = ctrl.alloc_qid()?;
        let generation = ctrl.generation();
        let spec = QpairSpec {
            qid,
            entries,
            max_frames: chunk_frames,
        };
        let created = ctrl
            .transport()
            .create_qpair(spec, &arena)
            .and_then(|mut qp| ctrl.connect_qpair(&mut qp).map(|()| qp));
        let qp = match created {
            Ok(qp) => qp,
            Err(e) => {
                ctrl.free_qid(qid);
                return Err(e);
            }
        };
        Ok(NvmeQueue {
            ctrl,
            arena,
            geometry,
            qp,
            table: Table::new(capacity),
            chunk_frames,
            with_rest: VecDeque::new(),
            reaped: Vec::with_capacity(usize::from(entries)),
            generation,
            next_scan: Nanos(0),
            stats: QueueStats::default(),
            prinfo,
        })
    }

    /// This queue's id on the controller.
    pub fn qid(&self) -> u16 {
        use crate::transport::Qpair as _;
        self.qp.qid()
    }
    /// Counters.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }
    /// The transport's queue pair, for its own counters and state.
    pub fn qpair(&self) -> &T::Qpair {
        &self.qp
    }
    /// Most 4 KiB frames one NVMe command carries on this queue.
    pub fn frames_per_command(&self) -> usize {
        self.chunk_frames
    }
    /// Command ids this queue has (its depth).
    pub fn depth(&self) -> usize {
        self.table.capacity()
    }
}

impl<T: Transport> DeviceQueue for NvmeQueue<T> {
    fn submit(&mut self, command: &Command<'_>) -> Result<Tag, DevError> {
        self.ensure_live()?;
        let nsid = self.ctrl.config().nsid;
        let bpp = self.geometry.blocks_per_page();
        match *command {
            Command::Read { lba, frames } | Command::Write { lba, frames, .. } => {
                // `Command::validate` for a transfer, inlined.
                self.geometry.check_transfer(lba, frames.len())?;
                let prinfo = self.prinfo;
                let sqe = |slba: u64, blocks: u32| {
                    let mut e = match *command {
                        Command::Write { fua, .. } => {
                            SubmissionEntry::write(nsid, slba, blocks, fua)
                        }
                        _ => SubmissionEntry::read(nsid, slba, blocks),
                    };
                    if prinfo != 0 {
                        e.protect(prinfo, slba as u32);
                    }
                    e
                };
                if frames.len() <= self.chunk_frames {
                    // One NVMe command: the usual case. The transport
                    // refuses a frame outside the arena before anything
                    // is sent (`QpairError::BadPayload`), and the request
                    // is withdrawn.
                    let tag = self.table.start_one().ok_or(DevError::QueueFull)?;
                    let blocks = (frames.len() as u64 * bpp) as u32;
                    let build = || sqe(lba.0, blocks);
                    if let Err(e) = self.send(tag, build, Payload::Frames(frames)) {
                        if let Some(e) = self.abandon(tag, e) {
                            return Err(e);
                        }
                    }
                    return Ok(Tag(u32::from(tag)));
                }
                // Every frame is checked before the first piece goes
                // out, so a bad one refuses the whole request.
                let count = self.arena.frame_count();
                if frames.iter().any(|f| f.0 >= count) {
                    return Err(DevError::InvalidRequest);
                }
                let pieces = frames.len().div_ceil(self.chunk_frames);
                if pieces > self.table.capacity() {
                    return Err(DevError::InvalidRequest);
                }
                // The first piece goes out on the request's own id.
                if pieces > self.table.available() {
                    return Err(DevError::QueueFull);
                }
                let tag = self.new_request(None)?;
                for (i, chunk) in frames.chunks(self.chunk_frames).enumerate() {
                    let slba = lba.0 + (i * self.chunk_frames) as u64 * bpp;
                    let blocks = (chunk.len() as u64 * bpp) as u32;
                    if let Err(e) = self.issue(tag, sqe(slba, blocks), Payload::Frames(chunk)) {
                        if let Some(e) = self.abandon(tag, e) {
                            return Err(e);
                        }
                        break;
                    }
                }
                Ok(Tag(u32::from(tag)))
            }
            Command::Flush => {
                command.validate(&self.geometry)?;
                let tag = self.new_request(None)?;
                if let Err(e) = self.issue(tag, SubmissionEntry::flush(nsid), Payload::None) {
                    if let Some(e) = self.abandon(tag, e) {
                        return Err(e);
                    }
                }
                Ok(Tag(u32::from(tag)))
            }
            Command::Deallocate { lba, blocks } | Command::WriteZeroes { lba, blocks } => {
                command.validate(&self.geometry)?;
                let ident = &self.ctrl.info().identify;
                let zeroes = matches!(command, Command::WriteZeroes { .. });
                if zeroes && !ident.supports_write_zeroes() {
                    return Err(DevError::InvalidRequest);
                }
                // Deallocate is advisory; a controller without DSM simply
                // keeps the blocks.
                let rest = (zeroes || ident.supports_dsm()).then_some(Unissued {
                    zeroes,
                    lba: lba.0,
                    blocks,
                });
                let tag = self.new_request(rest)?;
                self.pump();
                self.maybe_complete(tag);
                Ok(Tag(u32::from(tag)))
            }
        }
    }

    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        // Completions that finished before this poll go back first; one
        // that finishes while nothing waits goes straight back.
        let mut out = HandBack {
            done,
            room: max,
            handed: 0,
        };
        self.table.hand_back(&mut out);
        self.ctrl.tick(now);
        if self.ctrl.is_dead() {
            self.fail_all(DevError::ControllerFailed);
        } else {
            if self.generation != self.ctrl.generation() {
                self.resync();
            }
            if !self.reap(now, &mut out) {
                self.stats.protocol_errors += 1;
                self.ctrl.count(Trouble::ProtocolError);
                self.recover();
            }
            if !self.with_rest.is_empty() {
                self.pump();
            }
            let resyncs = self.stats.resyncs;
            self.check_timeouts(now);
            // Commands resubmitted by a recovery may already have completed.
            if self.stats.resyncs != resyncs && !self.reap(now, &mut out) {
                self.stats.protocol_errors += 1;
                self.ctrl.count(Trouble::ProtocolError);
                self.recover();
            }
        }
        self.table.hand_back(&mut out);
        out.handed
    }

    fn in_flight(&self) -> usize {
        self.table.in_flight()
    }
}

impl<T: Transport> Drop for NvmeQueue<T> {
    fn drop(&mut self) {
        let qid = self.qid();
        if !self.ctrl.is_dead() && self.generation == self.ctrl.generation() {
            // Disconnecting makes the controller drop the queue's commands;
            // if that fails the controller is reset so it forgets the
            // queue before its memory is freed.
            if self.ctrl.disconnect_qpair(qid).is_err() {
                let _ = self.ctrl.reset(self.generation);
            }
        }
        self.ctrl.free_qid(qid);
    }
}
