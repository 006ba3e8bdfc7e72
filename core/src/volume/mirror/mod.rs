//! [`Mirror`]: RAID-1 over legs that share one frame arena.
//!
//! - `assemble`: which legs hold the data, from the headers on them.
//! - `members`: the legs' states, events and error counts.
//! - `state`: what every queue shares (`MirrorState`); routing of writes.
//! - `queue`: [`MirrorQueue`], the hot path.
//! - `view`: how a resync waits for writes it cannot see.
//! - `bitmap`: the write-intent bitmap (regions that may differ between
//!   legs, so a returning leg is copied only there).
//! - `control`: header writes, the bitmap's clearing passes, and resync.
//! - `replace`: a new device in place of a failed leg.
//! - `open` (this file): putting a mirror together, closing it, and its
//!   administration (status, rejoin, fail).
//!
//! A `Mirror` is a handle: clones share one mirror, so a caller can keep
//! one to watch and administer the mirror while a filesystem owns another.

mod assemble;
mod bitmap;
mod control;
mod io;
mod members;
mod queue;
mod replace;
mod state;
mod view;

#[cfg(test)]
mod tests;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::Ordering::SeqCst;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};

pub use assemble::{assemble, Assembly};
pub use control::WINDOW_FRAMES;
pub use members::{LegErrors, LegState, MirrorEvent, MirrorStatus};
pub use queue::MirrorQueue;

use super::fanout::Fanout;
use super::header::{self, Header, Recorded};
use super::tally::Tally;
use super::{check_legs, VolumeError, MAX_LEGS};
use crate::dev::{BlockDevice, Command, DevError, FrameArena, Geometry};
use crate::stats::DeviceCounts;
use crate::sync::Mutex;
use crate::units::{FrameId, Lba, Nanos, PAGE_SIZE};
use bitmap::Bitmap;
use control::Control;
use members::Members;
use state::MirrorState;

/// Told of a mirror's events as they happen ([`OpenOptions::on_event`]).
pub type EventHook = Arc<dyn Fn(&MirrorEvent) + Send + Sync>;

/// How to open a mirror.
#[derive(Clone)]
pub struct OpenOptions {
    /// Take writes (and mark the mirror dirty until [`Mirror::close`]).
    /// Read-only, nothing is written, not even headers.
    pub writable: bool,
    /// After an unclean shutdown, the leg to keep (it must be in sync);
    /// the others are copied from it. By default the first leg in sync.
    pub prefer: Option<usize>,
    /// Called with every event as it happens (from whichever thread
    /// caused it; keep it short).
    pub on_event: Option<EventHook>,
}

impl core::fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OpenOptions")
            .field("writable", &self.writable)
            .field("prefer", &self.prefer)
            .field("on_event", &self.on_event.is_some())
            .finish()
    }
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions {
            writable: true,
            prefer: None,
            on_event: None,
        }
    }
}

/// A mirror over legs of type `D` (use [`crate::dev::either::Either`] to
/// mix kinds).
pub struct Mirror<D: BlockDevice> {
    shared: Arc<MirrorState<D>>,
    frames: MirrorFrames<D>,
}

impl<D: BlockDevice> Clone for Mirror<D> {
    fn clone(&self) -> Self {
        Mirror {
            shared: self.shared.clone(),
            frames: MirrorFrames {
                shared: self.shared.clone(),
                count: self.frames.count,
            },
        }
    }
}

impl<D: BlockDevice> core::fmt::Debug for Mirror<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Mirror")
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

/// The mirror's frames: the legs' arena less the frames the mirror keeps
/// for its own I/O (header writes, the resync window) at its end.
pub struct MirrorFrames<D: BlockDevice> {
    shared: Arc<MirrorState<D>>,
    count: u32,
}

impl<D: BlockDevice> core::fmt::Debug for MirrorFrames<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MirrorFrames")
            .field("count", &self.count)
            .finish()
    }
}

impl<D: BlockDevice> MirrorFrames<D> {
    fn arena(&self, frame: FrameId) -> Result<&D::Frames, DevError> {
        if frame.0 >= self.count {
            return Err(DevError::FrameRange);
        }
        self.shared
            .legs
            .first()
            .map(|l| l.frames())
            .ok_or(DevError::FrameRange)
    }
}

impl<D: BlockDevice> FrameArena for MirrorFrames<D> {
    fn frame_count(&self) -> u32 {
        self.count
    }
    fn read(&self, frame: FrameId, offset: usize, dst: &mut [u8]) -> Result<(), DevError> {
        self.arena(frame)?.read(frame, offset, dst)
    }
    fn write(&self, frame: FrameId, offset: usize, src: &[u8]) -> Result<(), DevError> {
        self.arena(frame)?.write(frame, offset, src)
    }
    fn fill(&self, frame: FrameId, offset: usize, len: usize, byte: u8) -> Result<(), DevError> {
        self.arena(frame)?.fill(frame, offset, len, byte)
    }
}

impl<D: BlockDevice> BlockDevice for Mirror<D> {
    type Queue = MirrorQueue<D>;
    type Frames = MirrorFrames<D>;
    fn geometry(&self) -> Geometry {
        self.shared.geometry
    }
    fn frames(&self) -> &MirrorFrames<D> {
        &self.frames
    }
    fn open_queue(&self) -> Result<MirrorQueue<D>, DevError> {
        Ok(MirrorQueue::open(self.shared.clone()))
    }
    fn leg_counts(&self) -> Vec<DeviceCounts> {
        let mut counts = self.shared.tally.sum();
        for (c, leg) in counts.iter_mut().zip(&self.shared.legs) {
            c.health = leg.health();
        }
        counts
    }
}

/// The legs' shape, checked: block size, pages per leg, the frames the
/// mirror keeps.
struct Shape {
    block_size: u32,
    leg_pages: Vec<u64>,
    reserved: core::ops::Range<u32>,
}

fn shape<D: BlockDevice>(legs: &[D]) -> Result<Shape, VolumeError> {
    let block_size = check_legs(legs)?;
    let leg_pages: Vec<u64> = legs.iter().map(|l| l.geometry().capacity_pages()).collect();
    if leg_pages.iter().any(|&p| p <= header::PAGES) {
        return Err(VolumeError::TooSmall);
    }
    if let Some(leg) = legs.iter().position(|l| !l.geometry().fua) {
        return Err(VolumeError::NoFua { leg });
    }
    let count = legs[0].frames().frame_count();
    let keep = (legs.len() as u32) + WINDOW_FRAMES;
    if count <= keep {
        return Err(VolumeError::TooFewFrames);
    }
    Ok(Shape {
        block_size,
        leg_pages,
        reserved: count - keep..count,
    })
}

/// The legs' block size is the mirror's, and every leg holds its data.
fn check_fits(shape: &Shape, assembly: &Assembly) -> Result<(), VolumeError> {
    let bpp = u64::from(PAGE_SIZE as u32 / shape.block_size);
    if assembly.block_size != shape.block_size {
        return Err(VolumeError::Foreign {
            leg: 0,
            field: "block size",
        });
    }
    for (leg, &pages) in shape.leg_pages.iter().enumerate() {
        if pages - header::PAGES < assembly.data_blocks / bpp {
            return Err(VolumeError::Foreign {
                leg,
                field: "leg size",
            });
        }
    }
    Ok(())
}

/// The control section's fanout, counting into a new tally that the
/// mirror's queues then share.
fn control_fanout<D: BlockDevice>(legs: &[D]) -> Fanout<D::Queue> {
    Fanout::new(
        legs.iter().map(|l| l.open_queue().ok()).collect(),
        Tally::new(legs.len()),
    )
}

/// What a leg's two header copies hold: its newest intact header, or
/// the version of a newer format if a copy was written by one.
type Found = Result<Header, Option<u32>>;

/// Each leg's header as `read_headers` found it (`None`: no header of a
/// mirror), or the refusal when a leg carries a header of a newer format
/// than this build reads.
fn known_headers(
    found: Vec<Result<Header, Option<u32>>>,
) -> Result<Vec<Option<Header>>, VolumeError> {
    let newer = found.iter().enumerate().find_map(|(leg, f)| match f {
        Err(Some(version)) => Some((leg, *version)),
        _ => None,
    });
    if let Some((leg, version)) = newer {
        return Err(VolumeError::NewerFormat { leg, version });
    }
    Ok(found.into_iter().map(Result::ok).collect())
}

/// Reads both header copies of every leg through the frames from `first`
/// on; returns each leg's newest intact header.
fn read_headers<D: BlockDevice>(
    legs: &[D],
    shape: &Shape,
    fanout: &mut Fanout<D::Queue>,
    clock: fn() -> Nanos,
    idle: fn(),
) -> Vec<Found> {
    let bpp = u64::from(PAGE_SIZE as u32 / shape.block_size);
    let first = shape.reserved.start + legs.len() as u32;
    let frames: Vec<FrameId> = (first..first + 2 * legs.len() as u32)
        .map(FrameId)
        .collect();
    let mut cmds = Vec::new();
    for (leg, &pages) in shape.leg_pages.iter().enumerate() {
        for copy in 0..2 {
            cmds.push((
                leg,
                Command::Read {
                    lba: Lba((pages - header::PAGES + copy) * bpp),
                    frames: &frames[2 * leg + copy as usize..][..1],
                },
            ));
        }
    }
    let results = io::run_all(fanout, &cmds, clock, idle);
    let arena = legs[0].frames();
    let mut block = [0u8; PAGE_SIZE];
    (0..legs.len())
        .map(|leg| {
            let mut newer = None;
            (0..2)
                .filter(|c| results[2 * leg + c].is_ok())
                .filter_map(|c| {
                    arena.read(frames[2 * leg + c], 0, &mut block).ok()?;
                    match Header::decode(&block) {
                        Ok(h) => Some(h),
                        Err(header::HeaderError::Version(v)) => {
                            newer = Some(v);
                            None
                        }
                        Err(_) => None,
                    }
                })
                .max_by_key(|h| h.generation)
                .ok_or(newer)
        })
        .collect()
}

impl<D: BlockDevice> Mirror<D> {
    /// Makes a new mirror of `legs` with identity `uuid`: writes a header
    /// on every leg and opens it. The legs are taken to be in sync as they
    /// are: the engine reads no block it has not written, so what the legs
    /// held before does not matter (md's `--assume-clean`).
    pub fn create(
        legs: Vec<D>,
        uuid: u64,
        options: OpenOptions,
        clock: fn() -> Nanos,
        idle: fn(),
    ) -> Result<Mirror<D>, VolumeError> {
        let shape = shape(&legs)?;
        let bpp = u64::from(PAGE_SIZE as u32 / shape.block_size);
        let smallest = shape.leg_pages.iter().copied().min().unwrap_or(0);
        let assembly = Assembly {
            uuid,
            generation: 0,
            data_blocks: (smallest - header::PAGES) * bpp,
            block_size: shape.block_size,
            table: [Recorded::InSync; MAX_LEGS],
            dirty: false,
            bitmap: None,
            covered: 0,
        };
        let fanout = control_fanout(&legs);
        Mirror::start(
            legs,
            shape,
            fanout,
            assembly,
            OpenOptions {
                writable: true,
                ..options
            },
            clock,
            idle,
        )
    }

    /// Opens the mirror on `legs` (given in their positions), deciding from
    /// their headers which are in sync (`assemble`). Opened writable, it is
    /// marked dirty until [`close`](Self::close), and stale legs are
    /// resynced as the mirror is polled ([`settle`](Self::settle) waits for
    /// that).
    pub fn open(
        legs: Vec<D>,
        options: OpenOptions,
        clock: fn() -> Nanos,
        idle: fn(),
    ) -> Result<Mirror<D>, VolumeError> {
        let shape = shape(&legs)?;
        let mut fanout = control_fanout(&legs);
        let headers = known_headers(read_headers(&legs, &shape, &mut fanout, clock, idle))?;
        let assembly = assemble(&headers, options.prefer)?;
        check_fits(&shape, &assembly)?;
        Mirror::start(legs, shape, fanout, assembly, options, clock, idle)
    }

    /// Each leg's newest intact header, read without opening the mirror.
    pub fn inspect(
        legs: &[D],
        clock: fn() -> Nanos,
        idle: fn(),
    ) -> Result<Vec<Option<Header>>, VolumeError> {
        let shape = shape(legs)?;
        let mut fanout = control_fanout(legs);
        let found = read_headers(legs, &shape, &mut fanout, clock, idle);
        Ok(found.into_iter().map(Result::ok).collect())
    }

    fn start(
        legs: Vec<D>,
        shape: Shape,
        fanout: Fanout<D::Queue>,
        a: Assembly,
        options: OpenOptions,
        clock: fn() -> Nanos,
        idle: fn(),
    ) -> Result<Mirror<D>, VolumeError> {
        let n = legs.len();
        let mut members = Members::new(n, a.generation, a.table, options.on_event);
        members.dirty = a.dirty;
        members.covered = a.covered;
        // Without a bitmap on the legs (a new mirror, a version 1 one),
        // the bitmap records from the generation this open writes.
        members.since = a.bitmap.map_or(a.generation + 1, |b| b.since);
        let depth = legs.iter().map(|l| l.geometry().queue_depth).min();
        let max_transfer = legs.iter().map(|l| l.geometry().max_transfer).min();
        let geometry = Geometry {
            block_size: shape.block_size,
            capacity: a.data_blocks,
            max_transfer: max_transfer.unwrap_or(0),
            queue_depth: depth.unwrap_or(0),
            // Every leg offers FUA (checked in `shape`), and a FUA write is
            // sent as one to each leg.
            fua: true,
        };
        let count = shape.reserved.start;
        let bpp = geometry.blocks_per_page();
        let shift = a
            .bitmap
            .map_or_else(|| header::region_shift(a.data_blocks / bpp), |b| b.shift);
        let bitmap = Bitmap::new(shift, a.data_blocks, bpp);
        if let Some(b) = &a.bitmap {
            bitmap.load(b);
        }
        let tally = fanout.tally();
        let shared = Arc::new(MirrorState {
            legs,
            uuid: a.uuid,
            geometry,
            leg_pages: shape.leg_pages,
            reserved: shape.reserved.clone(),
            writable: options.writable,
            in_sync: AtomicU32::new(members.in_sync()),
            target: AtomicU32::new(0),
            cursor: AtomicU64::new(0),
            window_end: AtomicU64::new(0),
            view: AtomicU64::new(0),
            generation: AtomicU64::new(a.generation),
            durable: AtomicU64::new(a.generation),
            bitmap,
            clear_delay: AtomicU64::new(CLEAR_DELAY.0),
            clear_at: AtomicU64::new(0),
            copied: AtomicU64::new(0),
            wanted: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            members: Mutex::new(members),
            control: Mutex::new(Control::new(fanout, shape.reserved)),
            slots: Mutex::new(Vec::new()),
            tally,
        });
        let mirror = Mirror {
            frames: MirrorFrames {
                shared: shared.clone(),
                count,
            },
            shared,
        };
        if options.writable {
            mirror.change(|m| m.dirty = true);
            mirror.write_headers(clock, idle)?;
        }
        Ok(mirror)
    }

    /// Changes the membership state in a new generation.
    fn change(&self, f: impl FnOnce(&mut Members)) {
        let mut m = self.shared.members.lock();
        m.generation += 1;
        f(&mut m);
        self.shared.publish(&m);
    }

    /// Writes the current membership state to every leg not failed, now,
    /// dropping legs that fail (while one in sync takes it).
    fn write_headers(&self, clock: fn() -> Nanos, idle: fn()) -> Result<(), VolumeError> {
        let shared = &*self.shared;
        let mut control = shared.control.lock();
        loop {
            let m = shared.members.lock();
            let generation = m.generation;
            let legs: Vec<usize> = (0..m.legs)
                .filter(|&l| m.table[l] != Recorded::Failed)
                .collect();
            let bits = shared.bitmap.snapshot();
            let headers: Vec<Header> = legs
                .iter()
                .map(|&l| header_of(shared, &m, l, &bits))
                .collect();
            drop(m);
            let frames: Vec<FrameId> = legs
                .iter()
                .map(|&l| FrameId(shared.reserved.start + l as u32))
                .collect();
            let mut cmds = Vec::new();
            for (i, h) in headers.iter().enumerate() {
                let lba =
                    control::stage_header(shared, legs[i], frames[i], h).map_err(|error| {
                        VolumeError::Leg {
                            leg: legs[i],
                            error,
                        }
                    })?;
                cmds.push((
                    legs[i],
                    Command::Write {
                        lba,
                        frames: &frames[i..i + 1],
                        fua: true,
                    },
                ));
            }
            let results = io::run_all(control.fanout(), &cmds, clock, idle);
            let (mut ok, mut failed, mut error) = (0u32, 0u32, None);
            for (i, r) in results.iter().enumerate() {
                match r {
                    Ok(()) => ok |= 1 << legs[i],
                    Err(e) => {
                        failed |= 1 << legs[i];
                        error.get_or_insert((legs[i], *e));
                    }
                }
            }
            let Some((leg, e)) = error else {
                shared.durable.fetch_max(generation, SeqCst);
                shared.bitmap.made_durable(&bits, &[]);
                return Ok(());
            };
            if !shared.legs_failed(ok, failed, e, generation) {
                return Err(VolumeError::Leg { leg, error: e });
            }
        }
    }
}

/// The header `shared`'s membership `m` and bitmap snapshot `bits` give
/// leg `leg`.
fn header_of<D: BlockDevice>(
    shared: &MirrorState<D>,
    m: &Members,
    leg: usize,
    bits: &[u64],
) -> Header {
    Header {
        block_size: shared.geometry.block_size,
        uuid: shared.uuid,
        generation: m.generation,
        data_blocks: shared.geometry.capacity,
        legs: m.legs as u8,
        index: leg as u8,
        dirty: m.dirty,
        table: m.table,
        bitmap: Some(header::Bitmap {
            shift: shared.bitmap.shift,
            since: m.since,
            bits: Bitmap::bits(bits),
        }),
    }
}

impl<D: BlockDevice> Mirror<D> {
    /// The legs, by position.
    pub fn legs(&self) -> &[D] {
        &self.shared.legs
    }

    /// The mirror's identity.
    pub fn uuid(&self) -> u64 {
        self.shared.uuid
    }

    /// Every leg's state, the generations, and error counts.
    pub fn status(&self) -> MirrorStatus {
        let s = &*self.shared;
        let m = s.members.lock();
        let target = s.target.load(SeqCst);
        let legs = (0..m.legs)
            .map(|l| {
                let state = match m.table[l] {
                    _ if target == l as u32 + 1 => LegState::Resyncing {
                        copied: s.cursor.load(SeqCst),
                    },
                    Recorded::InSync => LegState::InSync,
                    Recorded::Stale => LegState::Stale,
                    Recorded::Failed => LegState::Failed,
                };
                (state, m.errors[l])
            })
            .collect();
        MirrorStatus {
            uuid: s.uuid,
            generation: m.generation,
            durable_generation: s.durable.load(SeqCst),
            data_blocks: s.geometry.capacity,
            dirty: m.dirty,
            broken: s.broken.load(SeqCst),
            legs,
            region_bytes: s.bitmap.region_blocks() * u64::from(s.geometry.block_size),
            regions: s.bitmap.regions,
            dirty_regions: s.bitmap.count(),
            resync_copied: s.copied.load(SeqCst),
        }
    }

    /// Sets how long a region of the write-intent bitmap must go without
    /// a write before it is cleared ([`CLEAR_DELAY`] by default; a region
    /// is cleared between one and two such periods after its last write).
    pub fn set_clear_delay(&self, delay: Nanos) {
        self.shared.clear_delay.store(delay.0, SeqCst);
        self.shared.clear_at.store(0, SeqCst);
    }

    /// The events since the last call (the most recent 64 are kept).
    pub fn take_events(&self) -> Vec<MirrorEvent> {
        self.shared.members.lock().events.drain(..).collect()
    }

    fn check_leg(&self, leg: usize) -> Result<(), VolumeError> {
        if leg >= self.shared.legs.len() {
            return Err(VolumeError::NoSuchLeg);
        }
        if !self.shared.writable || self.shared.closed.load(SeqCst) {
            return Err(VolumeError::ReadOnly);
        }
        Ok(())
    }

    /// Takes a failed (or stale) leg back: it takes writes to what has
    /// been copied and is copied from the legs in sync as the mirror is
    /// polled; it serves reads once copied and flushed. A leg that left
    /// in sync is copied only in the regions the write-intent bitmap has
    /// marked since; any other is copied whole.
    pub fn rejoin(&self, leg: usize) -> Result<(), VolumeError> {
        self.check_leg(leg)?;
        self.join(leg, false)
    }

    /// Takes a leg back to be copied whole, whatever the bitmap says: for
    /// a new device in the leg's position.
    pub fn rejoin_whole(&self, leg: usize) -> Result<(), VolumeError> {
        self.check_leg(leg)?;
        self.join(leg, true)
    }

    fn join(&self, leg: usize, whole: bool) -> Result<(), VolumeError> {
        let mut m = self.shared.members.lock();
        if whole && m.table[leg] != Recorded::InSync {
            m.covered &= !(1 << leg);
        }
        match m.table[leg] {
            Recorded::InSync => Err(VolumeError::LegState {
                leg,
                state: LegState::InSync,
            }),
            Recorded::Stale if m.pending.contains(&leg) => Ok(()),
            Recorded::Stale if self.shared.target.load(SeqCst) == leg as u32 + 1 => Ok(()),
            Recorded::Stale | Recorded::Failed => {
                m.generation += 1;
                m.table[leg] = Recorded::Stale;
                m.joined_at[leg] = m.generation;
                m.pending.push_back(leg);
                m.event(MirrorEvent::Rejoined { leg });
                self.shared.publish(&m);
                Ok(())
            }
        }
    }

    /// Drops a leg (to replace or repair it), as if it had failed. The
    /// last leg in sync cannot be dropped.
    pub fn fail_leg(&self, leg: usize) -> Result<(), VolumeError> {
        self.check_leg(leg)?;
        let s = &*self.shared;
        let mut m = s.members.lock();
        if m.table[leg] == Recorded::Failed {
            return Ok(());
        }
        if m.in_sync() & !(1 << leg) == 0 {
            return Err(VolumeError::NoLegInSync);
        }
        if s.target.load(SeqCst) == leg as u32 + 1 {
            s.stop_resync();
        }
        m.leave(leg);
        m.generation += 1;
        m.table[leg] = Recorded::Failed;
        m.failed_at[leg] = m.generation;
        m.pending.retain(|&l| l != leg);
        m.event(MirrorEvent::LegRemoved { leg });
        s.publish(&m);
        Ok(())
    }

    /// Runs the control section once (header writes, resync) if nobody
    /// else is in it; true while it has work left. Someone must poll a
    /// mirror whose filesystem is idle for a resync to advance.
    pub fn poll_control(&self, now: Nanos) -> bool {
        if let Some(mut c) = self.shared.control.try_lock() {
            c.step(now, &self.shared);
        }
        self.shared.wanted.load(SeqCst)
    }

    /// Polls the control section until every stale leg is copied and the
    /// membership state is on the legs.
    pub fn settle(&self, clock: fn() -> Nanos, idle: fn()) -> Result<(), VolumeError> {
        while self.poll_control(clock()) {
            if self.shared.broken.load(SeqCst) {
                break;
            }
            idle();
        }
        if self.shared.broken.load(SeqCst) {
            return Err(VolumeError::NoLegInSync);
        }
        Ok(())
    }

    /// Shuts the mirror down cleanly: stops a resync (its leg stays stale),
    /// flushes the legs in sync and records the mirror clean, so the next
    /// open trusts every leg in sync without copying. Call it when no
    /// queue has I/O in flight (after the filesystem is unmounted); writes
    /// are refused from then on.
    pub fn close(&self, clock: fn() -> Nanos, idle: fn()) -> Result<(), VolumeError> {
        let s = &*self.shared;
        if !s.writable || s.closed.swap(true, SeqCst) {
            return Ok(());
        }
        s.stop_resync();
        loop {
            let mut c = s.control.lock();
            c.step(clock(), s);
            if !c.resyncing() && (s.is_durable(s.needed_generation()) || s.broken.load(SeqCst)) {
                break;
            }
            drop(c);
            idle();
        }
        let legs: Vec<usize> = (0..s.legs.len())
            .filter(|l| s.in_sync.load(SeqCst) & 1 << l != 0)
            .collect();
        let cmds: Vec<(usize, Command<'_>)> = legs.iter().map(|&l| (l, Command::Flush)).collect();
        let results = io::run_all(s.control.lock().fanout(), &cmds, clock, idle);
        let (mut ok, mut failed, mut error) = (0u32, 0u32, None);
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(()) => ok |= 1 << legs[i],
                Err(e) => {
                    failed |= 1 << legs[i];
                    error.get_or_insert((legs[i], e));
                }
            }
        }
        if let Some((leg, e)) = error {
            if !s.legs_failed(ok, failed, e, s.needed_generation()) {
                return Err(VolumeError::Leg { leg, error: e });
            }
        }
        if s.all_in_sync() {
            // Every leg holds every write, flushed: nothing may differ.
            s.bitmap.clear_all();
        }
        self.change(|m| {
            m.dirty = false;
            m.pending.clear();
        });
        self.write_headers(clock, idle)
    }
}

/// How long a region of the write-intent bitmap goes without a write
/// before it is cleared, by default (md's bitmap daemon sleeps 5 s).
pub const CLEAR_DELAY: Nanos = Nanos(5_000_000_000);

/// Pages a mirror keeps at the end of each leg for its headers.
pub const HEADER_PAGES: u64 = header::PAGES;
