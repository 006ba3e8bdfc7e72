//! The mirror's control section: writing headers when membership or the
//! write-intent bitmap changes, clearing the bitmap, and resyncing stale
//! legs. It owns a queue on every leg and the frames the mirror keeps, and
//! is advanced by [`Control::step`] from whichever queue polls while it has
//! work (or from `Mirror::poll_control`); a step never waits, it moves each
//! job as far as the completions allow.
//!
//! **Header writes.** When the membership generation is newer than the
//! one on the legs, or writes wait for bitmap marks, the current table and
//! bitmap are written (FUA) to every leg that is not failed, in a new
//! generation; one header carries every mark made since the last. A leg
//! that fails the write is dropped like a leg that fails a data write; if
//! no leg in sync took it, the mirror is broken.
//!
//! **Clearing** (lazy, once per clearing period, only while every leg is in
//! sync): take the marked regions no write touched for a whole period and
//! none has under way (`Bitmap::begin_clear`, after which writes to them
//! wait), flush every leg, then unmark those still idle and write a header
//! without them. A leg that leaves or fails the flush cancels the pass.
//!
//! **Resync** copies one stale leg (the target) from a leg in sync, in
//! windows of [`WINDOW_FRAMES`] pages, from the start: announce the window
//! (writes that overlap it park), bump the view and wait until no write
//! routed before is still on the legs (`view`), read the window from the
//! source, write it to the target, move the cursor past it (writes below
//! the cursor go to the target too). A covered target (one that left in
//! sync; `Members::covered`) is copied only in marked regions: a run of
//! clean regions is announced as one window and, once the wait is over
//! (its marks are then final: a write marks before it is routed, and no
//! mark is cleared while a leg is out of sync), passed over without I/O.
//! At the end the target is flushed, marked in sync, and serves reads. A
//! resync is not resumed after a restart: the leg is still stale in its
//! header and is copied again from the start (of its marked regions, if
//! its own header still says it left in sync). `docs/design/volumes.md` argues the
//! bitmap's rules.

use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::Ordering::{Release, SeqCst};

use super::super::fanout::Fanout;
use super::super::header::{Header, Recorded};
use super::members::MirrorEvent;
use super::state::MirrorState;
use crate::dev::{BlockDevice, Command, DevError, DeviceQueue, FrameArena};
use crate::units::{FrameId, Lba, Nanos};

/// Pages copied per resync window.
pub const WINDOW_FRAMES: u32 = 32;

const HEADER_OP: u32 = 0;
const RESYNC_OP: u32 = 1;
const CLEAR_OP: u32 = 2;

/// Commands out to the legs for one job, and how they went.
#[derive(Debug, Default)]
struct Pieces {
    outstanding: u32,
    ok: u32,
    failed: u32,
    error: Option<DevError>,
}

impl Pieces {
    /// A piece sent to `leg` finished.
    fn done(&mut self, leg: usize, r: Result<(), DevError>) {
        self.outstanding = self.outstanding.saturating_sub(1);
        match r {
            Ok(()) => self.ok |= 1 << leg,
            Err(e) => self.refused(leg, e),
        }
    }
    /// `leg` failed a piece (or would not take it).
    fn refused(&mut self, leg: usize, e: DevError) {
        self.failed |= 1 << leg;
        self.error.get_or_insert(e);
    }
}

#[derive(Debug)]
struct HeaderJob {
    generation: u64,
    /// The bitmap it carries.
    bits: Vec<u64>,
    pieces: Pieces,
}

/// A clearing pass waiting for its flush.
#[derive(Debug)]
struct Clearing {
    /// The regions it takes (words of the bitmap).
    regions: Vec<u64>,
    /// The membership generation when the flush was sent.
    sent: u64,
    pieces: Pieces,
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
    /// Copy only the bitmap's marked regions.
    only_marked: bool,
    /// The window is a run of clean regions, passed over if still clean.
    skip: bool,
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
    /// A header must be written for a clearing pass that finished.
    rewrite: bool,
    clearing: Option<Clearing>,
    resync: Option<Resync>,
    reaped: Vec<(u32, usize, Result<(), DevError>)>,
}

impl<Q: DeviceQueue> Control<Q> {
    pub(crate) fn new(fanout: Fanout<Q>, frames: Range<u32>) -> Control<Q> {
        Control {
            fanout,
            frames,
            header: None,
            rewrite: false,
            clearing: None,
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
            match op {
                HEADER_OP => {
                    if let Some(h) = self.header.as_mut() {
                        h.pieces.done(leg, r);
                    }
                }
                CLEAR_OP => {
                    if let Some(c) = self.clearing.as_mut() {
                        c.pieces.done(leg, r);
                    }
                }
                _ => {
                    if let Some(rs) = self.resync.as_mut() {
                        rs.outstanding = rs.outstanding.saturating_sub(1);
                        if let Err(e) = r {
                            rs.error.get_or_insert(e);
                        }
                    }
                }
            }
        }
        self.headers(shared);
        self.clear(now, shared);
        self.resync(shared);
        let busy = self.header.is_some()
            || self.resync.is_some()
            || self.clearing.is_some()
            || self.rewrite
            || shared.bitmap.pending(self.clearing_regions())
            || !shared.is_durable(shared.needed_generation())
            || !shared.members.lock().pending.is_empty();
        shared.wanted.store(busy, Release);
    }

    /// Finishes the header job under way, or starts one if the legs are
    /// behind or marks wait.
    fn headers<D: BlockDevice<Queue = Q>>(&mut self, shared: &MirrorState<D>) {
        if let Some(h) = &self.header {
            if h.pieces.outstanding > 0 {
                return;
            }
            let (generation, ok, failed) = (h.generation, h.pieces.ok, h.pieces.failed);
            let error = h.pieces.error.unwrap_or(DevError::Media);
            let Some(job) = self.header.take() else {
                return;
            };
            let survived = ok & shared.members.lock().in_sync() != 0;
            if failed != 0 {
                shared.legs_failed(ok, failed, error, generation);
            }
            if survived {
                // Marks of regions being cleared stay off until the pass
                // decides (`Bitmap::finish_clear`).
                shared
                    .bitmap
                    .made_durable(&job.bits, self.clearing_regions());
                shared.durable.fetch_max(generation, SeqCst);
                shared
                    .members
                    .lock()
                    .event(MirrorEvent::HeadersWritten { generation });
            } else if !shared.broken.swap(true, SeqCst) {
                shared.members.lock().event(MirrorEvent::Broken);
            }
        }
        let marks = self.rewrite || shared.bitmap.pending(self.clearing_regions());
        if shared.broken.load(SeqCst) || !marks && shared.is_durable(shared.needed_generation()) {
            return;
        }
        let mut m = shared.members.lock();
        if m.generation <= shared.durable.load(SeqCst) {
            // Only the bitmap changed: a generation of its own, so the
            // header goes to the other copy (a torn write leaves this one).
            m.generation += 1;
        }
        self.rewrite = false;
        let bits = shared.bitmap.snapshot();
        let mut writes = Vec::new();
        for leg in (0..m.legs).filter(|&l| m.table[l] != Recorded::Failed) {
            writes.push((leg, super::header_of(shared, &m, leg, &bits)));
        }
        let mut job = HeaderJob {
            generation: m.generation,
            bits,
            pieces: Pieces::default(),
        };
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
                Ok(()) => job.pieces.outstanding += 1,
                Err(e) => job.pieces.refused(leg, e),
            }
        }
        self.header = Some(job);
    }

    /// The regions of the clearing pass under way (none: empty).
    fn clearing_regions(&self) -> &[u64] {
        self.clearing.as_ref().map_or(&[][..], |c| &c.regions)
    }

    /// Moves the clearing pass on: finishes one whose flush is done (once
    /// no header write is under way), or starts one when it is due.
    fn clear<D: BlockDevice<Queue = Q>>(&mut self, now: Nanos, shared: &MirrorState<D>) {
        if let Some(c) = &self.clearing {
            if c.pieces.outstanding > 0 || self.header.is_some() {
                return;
            }
            let Some(c) = self.clearing.take() else {
                return;
            };
            if c.pieces.failed != 0 {
                let error = c.pieces.error.unwrap_or(DevError::Media);
                shared.legs_failed(c.pieces.ok, c.pieces.failed, error, c.sent);
            }
            // After the flush: a leg that left since may lack a write
            // to a region of the pass (`Bitmap::finish_clear` checks that
            // none is under way; a leg failing one leaves before the write
            // stops counting, so this check sees it).
            if c.pieces.failed == 0 && shared.all_in_sync() {
                shared.bitmap.finish_clear(&c.regions);
                self.rewrite = true;
            } else {
                shared.bitmap.cancel_clear(&c.regions);
            }
            return;
        }
        if now.0 < shared.clear_at.load(SeqCst) {
            return;
        }
        let delay = shared.clear_delay.load(SeqCst);
        shared.clear_at.store(now.0.saturating_add(delay), SeqCst);
        let quiet = shared.writable
            && !shared.closed.load(SeqCst)
            && !shared.broken.load(SeqCst)
            && shared.all_in_sync();
        if !quiet {
            return;
        }
        let regions = shared.bitmap.begin_clear();
        if regions.iter().all(|&w| w == 0) {
            return;
        }
        #[cfg(pollfs_mutants)]
        if crate::mutants::active(crate::mutants::Mutant::BitmapClearsBeforeFlush) {
            shared.bitmap.finish_clear(&regions);
            self.rewrite = true;
            return;
        }
        let mut c = Clearing {
            regions,
            sent: shared.needed_generation(),
            pieces: Pieces::default(),
        };
        for leg in 0..shared.legs.len() {
            shared.ensure_queue(&mut self.fanout, leg);
            match self.fanout.send(leg, CLEAR_OP, &Command::Flush) {
                Ok(()) => c.pieces.outstanding += 1,
                Err(e) => c.pieces.refused(leg, e),
            }
        }
        self.clearing = Some(c);
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
        let only_marked = m.covered & 1 << target != 0;
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
            only_marked,
            skip: false,
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
        m.covered &= !(1 << r.target);
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
                let whole = (at + window_pages * bpp).min(shared.geometry.capacity);
                let (end, skip) = if r.only_marked {
                    plan(shared, at, whole)
                } else {
                    (whole, false)
                };
                r.window = at..end;
                r.skip = skip;
                shared.window_end.store(end, SeqCst);
                let v = shared.view.fetch_add(1, SeqCst) + 1;
                r.phase = Phase::Grace(v);
            }
            Phase::Grace(v) => {
                if !shared.views_at_least(v) {
                    return Outcome::Wait;
                }
                if r.skip {
                    // No write routed before the window is on the legs and
                    // writes into it park: its marks are final. Pass over
                    // the clean regions up to the first marked one.
                    let bits = &shared.bitmap;
                    let size = bits.region_blocks();
                    let span = bits.span(r.window.start, r.window.end - r.window.start);
                    if let Some(first) = span.clone().find(|&g| bits.is_marked(g)) {
                        r.window.end = (u64::from(first) * size).max(r.window.start);
                    }
                    shared.cursor.store(r.window.end, SeqCst);
                    r.phase = Phase::Next;
                    continue;
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
                    let blocks = r.window.end - r.window.start;
                    shared.copied.fetch_add(blocks, SeqCst);
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

/// The next window of a resync that copies only marked regions, from
/// `at` (no further than `whole`, a full window, when copying): the rest
/// of `at`'s region if it is marked, or the run of clean regions from
/// `at` (to be passed over once its marks are final).
fn plan<D: BlockDevice>(shared: &MirrorState<D>, at: u64, whole: u64) -> (u64, bool) {
    let bits = &shared.bitmap;
    let size = bits.region_blocks();
    let capacity = shared.geometry.capacity;
    let first = (at / size) as u32;
    if bits.is_marked(first) {
        let region_end = (u64::from(first) + 1) * size;
        return (whole.min(region_end), false);
    }
    let run_end = (first..bits.regions)
        .find(|&g| bits.is_marked(g))
        .map_or(capacity, |g| u64::from(g) * size);
    (run_end.min(capacity), true)
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
    arena.write(frame, 0, &h.encode())?;
    let pages = *shared.leg_pages.get(leg).ok_or(DevError::InvalidRequest)?;
    Ok(Lba(
        Header::page(pages, h.generation) * shared.geometry.blocks_per_page()
    ))
}
