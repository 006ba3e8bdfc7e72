//! The mirror's control section: writing headers when membership changes,
//! and resyncing stale legs. It owns a queue on every leg and the frames
//! the mirror keeps, and is advanced by [`Control::step`] from whichever
//! queue polls while it has work (or from `Mirror::poll_control`); a step
//! never waits, it moves each job as far as the completions allow.
//!
//! **Header writes.** When the membership generation is newer than the
//! one on the legs, the current table is written (FUA) to every leg that
//! is not failed. A leg that fails the write is dropped like a leg that
//! fails a data write; if no leg in sync took it, the mirror is broken.
//!
//! **Resync** copies one stale leg (the target) from a leg in sync, in
//! windows of [`WINDOW_FRAMES`] pages, from the start: announce the window
//! (writes that overlap it park), bump the view and wait until no write
//! routed before is still on the legs (`view`), read the window from the
//! source, write it to the target, move the cursor past it (writes below
//! the cursor go to the target too). At the end the target is flushed,
//! marked in sync, and serves reads. A resync is not resumed after a
//! restart: the leg is still stale in its header and is copied again from
//! the start. A per-region dirty bitmap (md's write-intent bitmap) would
//! copy only what changed, at the price of a header write before the first
//! write to each clean region; `docs/design.md` argues the choice.

use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::Ordering::{Release, SeqCst};

use super::super::fanout::Fanout;
use super::super::header::{Header, Recorded};
use super::members::MirrorEvent;
use super::state::MirrorState;
use crate::dev::{BlockDevice, Command, DevError, DeviceQueue, FrameArena};
use crate::units::{FrameId, Lba, Nanos, PAGE_SIZE};

/// Pages copied per resync window.
pub const WINDOW_FRAMES: u32 = 32;

const HEADER_OP: u32 = 0;
const RESYNC_OP: u32 = 1;

#[derive(Debug)]
struct HeaderJob {
    generation: u64,
    outstanding: u32,
    ok: u32,
    failed: u32,
    error: Option<DevError>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Announce the next window (or flush, past the end).
    Next,
    /// Wait until every write routed before view `.0` is off the legs.
    Grace(u64),
    Read,
    Write,
    Flush,
}

#[derive(Debug)]
struct Resync {
    target: usize,
    source: usize,
    /// Sources that failed a read of this window.
    tried: u32,
    phase: Phase,
    window: Range<u64>,
    outstanding: u32,
    error: Option<DevError>,
}

/// The control section (behind `MirrorState::control`).
#[derive(Debug)]
pub(crate) struct Control<Q> {
    fanout: Fanout<Q>,
    /// Frames kept for headers (one per leg), then the resync window.
    frames: Range<u32>,
    header: Option<HeaderJob>,
    resync: Option<Resync>,
    reaped: Vec<(u32, usize, Result<(), DevError>)>,
}

impl<Q: DeviceQueue> Control<Q> {
    pub(crate) fn new(fanout: Fanout<Q>, frames: Range<u32>) -> Control<Q> {
        Control {
            fanout,
            frames,
            header: None,
            resync: None,
            reaped: Vec::new(),
        }
    }

    /// The fanout, for the synchronous I/O of open and close.
    pub(crate) fn fanout(&mut self) -> &mut Fanout<Q> {
        &mut self.fanout
    }

    /// True while a resync runs.
    pub(crate) fn resyncing(&self) -> bool {
        self.resync.is_some()
    }

    /// Moves every job as far as it can go without waiting.
    pub(crate) fn step<D: BlockDevice<Queue = Q>>(&mut self, now: Nanos, shared: &MirrorState<D>) {
        let reaped = &mut self.reaped;
        self.fanout
            .poll(now, 64, &mut |op, leg, r| reaped.push((op, leg, r)));
        for (op, leg, r) in core::mem::take(&mut self.reaped) {
            let job = match op {
                HEADER_OP => self
                    .header
                    .as_mut()
                    .map(|h| (&mut h.outstanding, &mut h.error)),
                _ => self
                    .resync
                    .as_mut()
                    .map(|r| (&mut r.outstanding, &mut r.error)),
            };
            if let Some((outstanding, error)) = job {
                *outstanding = outstanding.saturating_sub(1);
                if let Err(e) = r {
                    error.get_or_insert(e);
                }
            }
            if let (HEADER_OP, Some(h)) = (op, self.header.as_mut()) {
                match r {
                    Ok(()) => h.ok |= 1 << leg,
                    Err(_) => h.failed |= 1 << leg,
                }
            }
        }
        self.headers(shared);
        self.resync(shared);
        let busy = self.header.is_some()
            || self.resync.is_some()
            || !shared.is_durable(shared.needed_generation())
            || !shared.members.lock().pending.is_empty();
        shared.wanted.store(busy, Release);
    }

    /// Finishes the header job under way, or starts one if the legs are
    /// behind.
    fn headers<D: BlockDevice<Queue = Q>>(&mut self, shared: &MirrorState<D>) {
        if let Some(h) = &self.header {
            if h.outstanding > 0 {
                return;
            }
            let (generation, ok, failed) = (h.generation, h.ok, h.failed);
            let error = h.error.unwrap_or(DevError::Media);
            self.header = None;
            let survived = ok & shared.members.lock().in_sync() != 0;
            if failed != 0 {
                shared.legs_failed(ok, failed, error, generation);
            }
            if survived {
                shared.durable.fetch_max(generation, SeqCst);
                shared
                    .members
                    .lock()
                    .event(MirrorEvent::HeadersWritten { generation });
            } else if !shared.broken.swap(true, SeqCst) {
                shared.members.lock().event(MirrorEvent::Broken);
            }
        }
        if shared.broken.load(SeqCst) || shared.is_durable(shared.needed_generation()) {
            return;
        }
        let m = shared.members.lock();
        let mut job = HeaderJob {
            generation: m.generation,
            outstanding: 0,
            ok: 0,
            failed: 0,
            error: None,
        };
        let mut writes = Vec::new();
        for leg in (0..m.legs).filter(|&l| m.table[l] != Recorded::Failed) {
            writes.push((leg, super::header_of(shared, &m, leg)));
        }
        drop(m);
        for (leg, h) in writes {
            let frame = FrameId(self.frames.start + leg as u32);
            let sent = stage_header(shared, leg, frame, &h).and_then(|lba| {
                shared.ensure_queue(&mut self.fanout, leg);
                let frames = [frame];
                let cmd = Command::Write {
                    lba,
                    frames: &frames,
                    fua: true,
                };
                self.fanout.send(leg, HEADER_OP, &cmd)
            });
            match sent {
                Ok(()) => job.outstanding += 1,
                Err(e) => {
                    job.failed |= 1 << leg;
                    job.error.get_or_insert(e);
                }
            }
        }
        self.header = Some(job);
    }

    /// Advances the resync, starting one if a stale leg waits.
    fn resync<D: BlockDevice<Queue = Q>>(&mut self, shared: &MirrorState<D>) {
        if self.resync.is_none() {
            self.start_resync(shared);
        }
        let Some(r) = self.resync.as_mut() else {
            return;
        };
        if shared.target.load(SeqCst) != r.target as u32 + 1 {
            // The target failed a write: wait for what is out, then stop.
            if r.outstanding == 0 {
                self.resync = None;
            }
            return;
        }
        match advance(shared, &mut self.fanout, r, self.frames.start) {
            Outcome::Wait => {}
            Outcome::Finished => self.finish(shared),
            Outcome::TargetFailed(e) => self.target_failed(shared, e),
            Outcome::NoSource(e) => {
                let leg = r.target;
                self.resync = None;
                shared.stop_resync();
                shared
                    .members
                    .lock()
                    .event(MirrorEvent::ResyncStopped { leg, error: e });
            }
        }
    }

    fn start_resync<D: BlockDevice<Queue = Q>>(&mut self, shared: &MirrorState<D>) {
        if !shared.writable || shared.closed.load(SeqCst) {
            return;
        }
        let mut m = shared.members.lock();
        let Some(target) = m.pending.pop_front() else {
            return;
        };
        let in_sync = m.in_sync();
        if m.table[target] != Recorded::Stale || in_sync == 0 {
            return;
        }
        let source = in_sync.trailing_zeros() as usize;
        shared.ensure_queue(&mut self.fanout, target);
        shared.cursor.store(0, SeqCst);
        shared.window_end.store(0, SeqCst);
        shared.target.store(target as u32 + 1, SeqCst);
        m.event(MirrorEvent::ResyncStarted {
            leg: target,
            source,
        });
        self.resync = Some(Resync {
            target,
            source,
            tried: 0,
            phase: Phase::Next,
            window: 0..0,
            outstanding: 0,
            error: None,
        });
    }

    /// The target failed a write or the flush: it is dropped again.
    fn target_failed<D: BlockDevice>(&mut self, shared: &MirrorState<D>, error: DevError) {
        let Some(r) = self.resync.take() else {
            return;
        };
        shared.stop_resync();
        let mut m = shared.members.lock();
        m.write_error(r.target, error);
        m.fail(r.target, error);
        m.event(MirrorEvent::ResyncStopped {
            leg: r.target,
            error,
        });
        shared.publish(&m);
    }

    /// The target holds everything and is flushed: it is in sync.
    fn finish<D: BlockDevice>(&mut self, shared: &MirrorState<D>) {
        let Some(r) = self.resync.take() else {
            return;
        };
        let mut m = shared.members.lock();
        m.generation += 1;
        m.table[r.target] = Recorded::InSync;
        m.event(MirrorEvent::ResyncFinished { leg: r.target });
        // In sync before the target stops being the target: a write
        // routed in between takes the target either way.
        shared.publish(&m);
        shared.stop_resync();
    }
}

/// Where a resync step left the resync.
enum Outcome {
    /// Waiting for completions or for writes to leave the window.
    Wait,
    /// Copied and flushed.
    Finished,
    /// The target failed a write or the flush.
    TargetFailed(DevError),
    /// No leg in sync could be read.
    NoSource(DevError),
}

/// Runs the resync's phases as far as completions allow.
fn advance<D: BlockDevice>(
    shared: &MirrorState<D>,
    fanout: &mut Fanout<D::Queue>,
    r: &mut Resync,
    reserved: u32,
) -> Outcome {
    let window_pages = u64::from(WINDOW_FRAMES);
    let bpp = shared.geometry.blocks_per_page();
    let first = reserved + shared.legs.len() as u32;
    loop {
        if r.outstanding > 0 {
            return Outcome::Wait;
        }
        match r.phase {
            Phase::Next => {
                let at = r.window.end;
                if at >= shared.geometry.capacity {
                    r.phase = Phase::Flush;
                    let target = r.target;
                    send(shared, fanout, r, target, &Command::Flush);
                    continue;
                }
                let end = (at + window_pages * bpp).min(shared.geometry.capacity);
                r.window = at..end;
                shared.window_end.store(end, SeqCst);
                let v = shared.view.fetch_add(1, SeqCst) + 1;
                r.phase = Phase::Grace(v);
            }
            Phase::Grace(v) => {
                if !shared.views_at_least(v) {
                    return Outcome::Wait;
                }
                // The source must be in sync now: a leg dropped since the
                // last window may lack writes to this one.
                let in_sync = shared.in_sync.load(SeqCst);
                if in_sync & 1 << r.source == 0 {
                    if in_sync == 0 {
                        return Outcome::NoSource(DevError::ControllerFailed);
                    }
                    r.source = in_sync.trailing_zeros() as usize;
                }
                r.phase = Phase::Read;
                let source = r.source;
                send_window(shared, fanout, r, source, first, false);
            }
            Phase::Read => match r.error.take() {
                None => {
                    r.phase = Phase::Write;
                    let target = r.target;
                    send_window(shared, fanout, r, target, first, true);
                }
                Some(e) => {
                    shared.read_failed(r.source, e);
                    r.tried |= 1 << r.source;
                    let others = shared.in_sync.load(SeqCst) & !r.tried;
                    if others == 0 {
                        return Outcome::NoSource(e);
                    }
                    r.source = others.trailing_zeros() as usize;
                    let source = r.source;
                    send_window(shared, fanout, r, source, first, false);
                }
            },
            Phase::Write => match r.error.take() {
                None => {
                    shared.cursor.store(r.window.end, SeqCst);
                    r.tried = 0;
                    r.phase = Phase::Next;
                }
                Some(e) => return Outcome::TargetFailed(e),
            },
            Phase::Flush => match r.error.take() {
                None => return Outcome::Finished,
                Some(e) => return Outcome::TargetFailed(e),
            },
        }
    }
}

/// Sends `cmd` to `leg` as a piece of the resync.
fn send<D: BlockDevice>(
    shared: &MirrorState<D>,
    fanout: &mut Fanout<D::Queue>,
    r: &mut Resync,
    leg: usize,
    cmd: &Command<'_>,
) {
    shared.ensure_queue(fanout, leg);
    match fanout.send(leg, RESYNC_OP, cmd) {
        Ok(()) => r.outstanding += 1,
        Err(e) => {
            r.error.get_or_insert(e);
        }
    }
}

/// Reads (or writes) the window from (to) `leg` through the window frames
/// starting at `first`, in commands no larger than the legs take.
fn send_window<D: BlockDevice>(
    shared: &MirrorState<D>,
    fanout: &mut Fanout<D::Queue>,
    r: &mut Resync,
    leg: usize,
    first: u32,
    write: bool,
) {
    let bpp = shared.geometry.blocks_per_page();
    let pages = ((r.window.end - r.window.start) / bpp) as u32;
    let frames: Vec<FrameId> = (first..first + pages).map(FrameId).collect();
    let max = shared.geometry.max_frames_per_command();
    for (i, part) in frames.chunks(max).enumerate() {
        let lba = Lba(r.window.start + (i * max) as u64 * bpp);
        let cmd = if write {
            Command::Write {
                lba,
                frames: part,
                fua: false,
            }
        } else {
            Command::Read { lba, frames: part }
        };
        send(shared, fanout, r, leg, &cmd);
    }
}

/// Puts header `h` in `frame` and returns where its copy goes on `leg`.
pub(crate) fn stage_header<D: BlockDevice>(
    shared: &MirrorState<D>,
    leg: usize,
    frame: FrameId,
    h: &Header,
) -> Result<Lba, DevError> {
    let arena = shared
        .legs
        .first()
        .ok_or(DevError::InvalidRequest)?
        .frames();
    arena.fill(frame, 0, PAGE_SIZE, 0)?;
    arena.write(frame, 0, &h.encode())?;
    let pages = *shared.leg_pages.get(leg).ok_or(DevError::InvalidRequest)?;
    Ok(Lba(
        Header::page(pages, h.generation) * shared.geometry.blocks_per_page()
    ))
}
