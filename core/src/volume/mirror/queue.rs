//! [`MirrorQueue`]: a queue of a mirror, with a queue on every leg.
//!
//! - Reads go to one leg in sync, round robin per queue; a leg that fails
//!   one is counted and the read goes to the next leg in sync not yet
//!   tried.
//! - Writes, trims and write-zeroes first enter their regions of the
//!   write-intent bitmap (`bitmap`); a write to a region whose mark is not
//!   on the legs yet waits (`marking`) until the control section has
//!   written it. Then they are routed (`MirrorState::route`): to the
//!   legs in sync, plus the leg being resynced if the range is below its
//!   cursor; a write overlapping the window being copied parks and is
//!   routed again on a later poll. Each is registered under the view it
//!   was routed in (`view`).
//! - Flushes go to the legs in sync and the leg being resynced.
//! - A write or flush that finished on the legs completes once the
//!   membership generation it saw is on the legs (at once, unless a leg
//!   was just dropped): a leg dropped from its routing must be known
//!   dropped after a crash.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::Ordering::SeqCst;

use super::super::fanout::Fanout;
use super::state::{MirrorState, Route};
use super::view::Views;
use crate::dev::requests::Requests;
use crate::dev::{BlockDevice, Command, CommandKind, Completion, DevError, DeviceQueue, Tag};
use crate::units::{FrameId, Lba, Nanos};

#[derive(Debug)]
struct Op {
    kind: CommandKind,
    lba: Lba,
    blocks: u64,
    frames: Vec<FrameId>,
    fua: bool,
    /// Leg commands out.
    outstanding: u32,
    /// Legs that completed it, and that failed it.
    ok: u32,
    failed: u32,
    error: Option<DevError>,
    /// Legs a read has been sent to.
    tried: u32,
    /// The view a write was routed under, while it is on the legs.
    view: Option<u64>,
    /// Generation that must be on the legs before it completes.
    hold: u64,
    /// Counted in its bitmap regions until it completes.
    entered: bool,
    /// The membership generation when it was routed.
    sent: u64,
}

impl Default for Op {
    fn default() -> Op {
        Op {
            kind: CommandKind::Flush,
            lba: Lba(0),
            blocks: 0,
            frames: Vec::new(),
            fua: false,
            outstanding: 0,
            ok: 0,
            failed: 0,
            error: None,
            tried: 0,
            view: None,
            hold: 0,
            entered: false,
            sent: 0,
        }
    }
}

impl Op {
    fn command(&self) -> Command<'_> {
        match self.kind {
            CommandKind::Read => Command::Read {
                lba: self.lba,
                frames: &self.frames,
            },
            CommandKind::Write => Command::Write {
                lba: self.lba,
                frames: &self.frames,
                fua: self.fua,
            },
            CommandKind::Flush => Command::Flush,
            CommandKind::Deallocate => Command::Deallocate {
                lba: self.lba,
                blocks: self.blocks,
            },
            CommandKind::WriteZeroes => Command::WriteZeroes {
                lba: self.lba,
                blocks: self.blocks,
            },
        }
    }
}

/// A queue of a [`super::Mirror`].
pub struct MirrorQueue<D: BlockDevice> {
    shared: Arc<MirrorState<D>>,
    fanout: Fanout<D::Queue>,
    ops: Requests<Op>,
    /// Writes waiting for their bitmap marks to reach the legs.
    marking: Vec<u32>,
    /// Writes waiting for the resync window to move past them.
    parked: Vec<u32>,
    /// Finished on the legs, waiting for a generation to be on the legs.
    held: Vec<u32>,
    reaped: Vec<(u32, usize, Result<(), DevError>)>,
    /// Where the next read looks for a leg.
    next_read: usize,
    /// Last field: dropped after the leg queues.
    views: Views,
}

impl<D: BlockDevice> core::fmt::Debug for MirrorQueue<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MirrorQueue")
            .field("in_flight", &self.ops.in_flight())
            .finish_non_exhaustive()
    }
}

impl<D: BlockDevice> MirrorQueue<D> {
    pub(super) fn open(shared: Arc<MirrorState<D>>) -> MirrorQueue<D> {
        let queues = shared.legs.iter().map(|l| l.open_queue().ok()).collect();
        let views = Views::new(shared.new_slot());
        MirrorQueue {
            fanout: Fanout::new(queues, shared.tally.clone()),
            shared,
            ops: Requests::default(),
            marking: Vec::new(),
            parked: Vec::new(),
            held: Vec::new(),
            reaped: Vec::new(),
            next_read: 0,
            views,
        }
    }

    fn finish(&mut self, id: u32, result: Result<(), DevError>) {
        if let Some(op) = self.ops.get_mut(id) {
            if core::mem::take(&mut op.entered) {
                self.shared.bitmap.leave(op.lba.0, op.blocks);
            }
        }
        self.ops.finish(id, result);
    }

    /// Enters a write's bitmap regions, then routes it or keeps it until
    /// its marks are on the legs.
    fn enter(&mut self, id: u32) {
        let Some(op) = self.ops.get_mut(id) else {
            return;
        };
        op.entered = true;
        if self.shared.bitmap.enter(op.lba.0, op.blocks) {
            self.route(id)
        } else {
            self.shared.wanted.store(true, SeqCst);
            self.marking.push(id);
        }
    }

    /// Sends `cmd` of operation `id` to every leg in `legs` (just routed).
    fn send_to(&mut self, id: u32, legs: u32) {
        let Some(op) = self.ops.get_mut(id) else {
            return;
        };
        // Read after the routing: a route that saw a leg rejoined sees
        // the rejoin's generation here.
        op.sent = self.shared.needed_generation();
        let (mut sent, mut failed, mut error) = (0, 0, None);
        for leg in (0..self.shared.legs.len()).filter(|l| legs & 1 << l != 0) {
            self.shared.ensure_queue(&mut self.fanout, leg);
            match self.fanout.send(leg, id, &op.command()) {
                Ok(()) => sent += 1,
                Err(e) => {
                    failed |= 1 << leg;
                    error.get_or_insert(e);
                }
            }
        }
        op.outstanding = sent;
        op.failed |= failed;
        if let Some(e) = error {
            op.error.get_or_insert(e);
        }
        if sent == 0 {
            self.legs_done(id);
        }
    }

    /// Sends a read to the next leg in sync it has not tried.
    fn send_read(&mut self, id: u32) {
        let legs = self.shared.legs.len();
        loop {
            let Some(op) = self.ops.get_mut(id) else {
                return;
            };
            let untried = self.shared.in_sync.load(SeqCst) & !op.tried;
            let Some(leg) = (0..legs)
                .map(|i| (self.next_read + i) % legs)
                .find(|l| untried & 1 << l != 0)
            else {
                let e = op.error.unwrap_or(DevError::Media);
                return self.finish(id, Err(e));
            };
            op.tried |= 1 << leg;
            self.next_read = (leg + 1) % legs;
            self.shared.ensure_queue(&mut self.fanout, leg);
            match self.fanout.send(leg, id, &op.command()) {
                Ok(()) => {
                    op.outstanding = 1;
                    return;
                }
                Err(e) => {
                    op.error = Some(e);
                    self.shared.read_failed(leg, e);
                }
            }
        }
    }

    /// Routes a write: parks it, or registers it under the view it was
    /// routed in and sends it.
    fn route(&mut self, id: u32) {
        let Some(op) = self.ops.get_mut(id) else {
            return;
        };
        let (lba, blocks) = (op.lba.0, op.blocks);
        loop {
            let seen = self.shared.view.load(SeqCst);
            match self.shared.route(lba, blocks) {
                Route::Park => return self.parked.push(id),
                Route::Legs(legs) => {
                    self.views.register(seen);
                    if self.shared.view.load(SeqCst) != seen {
                        self.views.deregister(seen);
                        continue;
                    }
                    if let Some(op) = self.ops.get_mut(id) {
                        op.view = Some(seen);
                    }
                    return self.send_to(id, legs);
                }
            }
        }
    }

    /// A write or flush has finished on every leg it went to.
    fn legs_done(&mut self, id: u32) {
        let Some(op) = self.ops.get_mut(id) else {
            return;
        };
        let view = op.view.take();
        let (ok, failed) = (op.ok, op.failed);
        let error = op.error.unwrap_or(DevError::Media);
        // Legs that failed it leave the legs in sync before the write stops
        // holding a resync up: a window must not be copied from a leg that
        // missed a write to it.
        let sent = op.sent;
        let survived = failed == 0 || self.shared.legs_failed(ok, failed, error, sent);
        if let Some(v) = view {
            self.views.deregister(v);
        }
        if !survived {
            return self.finish(id, Err(error));
        }
        let hold = self.shared.needed_generation();
        if let Some(op) = self.ops.get_mut(id) {
            op.hold = hold;
        }
        if self.shared.is_durable(hold) {
            self.finish(id, Ok(()));
        } else {
            self.held.push(id);
        }
    }

    /// A leg finished its piece of operation `id`.
    fn piece_done(&mut self, id: u32, leg: usize, result: Result<(), DevError>) {
        let Some(op) = self.ops.get_mut(id) else {
            return;
        };
        op.outstanding = op.outstanding.saturating_sub(1);
        if op.kind == CommandKind::Read {
            return match result {
                Ok(()) => self.finish(id, Ok(())),
                Err(e) => {
                    op.error = Some(e);
                    self.shared.read_failed(leg, e);
                    self.send_read(id)
                }
            };
        }
        match result {
            Ok(()) => op.ok |= 1 << leg,
            Err(e) => {
                op.failed |= 1 << leg;
                op.error.get_or_insert(e);
            }
        }
        if op.outstanding == 0 {
            self.legs_done(id);
        }
    }

    /// Routes parked writes again, and completes held ones whose
    /// generation reached the legs.
    fn retry_waiting(&mut self) {
        if !self.marking.is_empty() {
            let broken = self.shared.broken.load(SeqCst);
            for id in core::mem::take(&mut self.marking) {
                let span = self.ops.get_mut(id).map(|op| (op.lba.0, op.blocks));
                let Some((lba, blocks)) = span else {
                    continue;
                };
                if broken {
                    self.finish(id, Err(DevError::ControllerFailed));
                } else if self.shared.bitmap.ready(lba, blocks) {
                    self.route(id);
                } else {
                    self.shared.wanted.store(true, SeqCst);
                    self.marking.push(id);
                }
            }
        }
        if !self.parked.is_empty() {
            for id in core::mem::take(&mut self.parked) {
                self.route(id);
            }
        }
        if !self.held.is_empty() {
            let broken = self.shared.broken.load(SeqCst);
            for id in core::mem::take(&mut self.held) {
                let hold = self.ops.get_mut(id).map_or(0, |op| op.hold);
                if self.shared.is_durable(hold) {
                    self.finish(id, Ok(()));
                } else if broken {
                    self.finish(id, Err(DevError::ControllerFailed));
                } else {
                    self.held.push(id);
                }
            }
        }
    }
}

impl<D: BlockDevice> DeviceQueue for MirrorQueue<D> {
    fn submit(&mut self, cmd: &Command<'_>) -> Result<Tag, DevError> {
        cmd.validate(&self.shared.geometry)?;
        let write = !matches!(cmd, Command::Read { .. } | Command::Flush);
        if write
            && (!self.shared.writable
                || self.shared.closed.load(SeqCst)
                || self.shared.broken.load(SeqCst))
        {
            return Err(DevError::InvalidRequest);
        }
        if self.ops.in_flight() >= self.shared.geometry.queue_depth as usize {
            return Err(DevError::QueueFull);
        }
        let (id, op) = self.ops.take();
        op.kind = cmd.kind();
        op.frames.clear();
        op.fua = false;
        (op.lba, op.blocks) = cmd.block_span(&self.shared.geometry).unwrap_or((Lba(0), 0));
        if let Command::Read { frames, .. } | Command::Write { frames, .. } = cmd {
            op.frames.extend_from_slice(frames);
        }
        if let Command::Write { fua, .. } = cmd {
            op.fua = *fua;
        }
        (op.outstanding, op.ok, op.failed, op.tried) = (0, 0, 0, 0);
        (op.error, op.view, op.hold, op.entered) = (None, None, 0, false);
        match cmd {
            Command::Read { .. } => self.send_read(id),
            Command::Flush => {
                let legs = self.shared.flush_legs();
                self.send_to(id, legs)
            }
            _ => self.enter(id),
        }
        Ok(Tag(id))
    }

    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        self.shared.try_control(now);
        self.retry_waiting();
        let reaped = &mut self.reaped;
        self.fanout
            .poll(now, max, &mut |op, leg, r| reaped.push((op, leg, r)));
        let mut reaped = core::mem::take(&mut self.reaped);
        for (id, leg, result) in reaped.drain(..) {
            self.piece_done(id, leg, result);
        }
        self.reaped = reaped;
        self.retry_waiting();
        self.ops.hand_back(max, done)
    }

    fn in_flight(&self) -> usize {
        self.ops.in_flight()
    }
}
