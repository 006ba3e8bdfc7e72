//! The state every queue of a mirror shares.
//!
//! Routing reads atomics only: which legs are in sync, which leg is being
//! resynced and how far, the view counter (`view`), the generations, and
//! the write-intent bitmap (`bitmap`).
//! The rest sits behind two spin locks, both off the hot path: `members`
//! (leg states, events) and `control` (header writes and the resync, see
//! `control`). Lock order: `control`, then `members`, then `slots`.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};

use super::super::fanout::Fanout;
use super::super::header::Recorded;
use super::super::tally::Tally;
use super::bitmap::Bitmap;
use super::control::Control;
use super::members::Members;
use super::view::ViewSlot;
use crate::dev::{BlockDevice, DevError, Geometry};
use crate::sync::Mutex;
use crate::units::Nanos;

/// Where a write goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// To these legs (bit mask).
    Legs(u32),
    /// Nowhere yet: it overlaps the window being copied; route it again
    /// later.
    Park,
}

pub(crate) struct MirrorState<D: BlockDevice> {
    pub legs: Vec<D>,
    pub uuid: u64,
    /// The mirror's geometry.
    pub geometry: Geometry,
    /// Each leg's size in pages (its header copies are its last two).
    pub leg_pages: Vec<u64>,
    /// Frames the mirror keeps for itself: one header frame per leg, then
    /// the resync window.
    pub reserved: Range<u32>,
    /// Opened for writing.
    pub writable: bool,
    /// Bit per leg: in sync.
    pub in_sync: AtomicU32,
    /// The leg being resynced, plus one (0: none).
    pub target: AtomicU32,
    /// Blocks below this are copied to the target.
    pub cursor: AtomicU64,
    /// End of the window being copied (`>= cursor`).
    pub window_end: AtomicU64,
    /// Bumped after every change of routing the resync makes (`view`).
    pub view: AtomicU64,
    /// `members.generation` as of the last change of membership, for the
    /// hot path (a header written only for the bitmap does not move it).
    pub generation: AtomicU64,
    /// The generation on every leg that takes writes.
    pub durable: AtomicU64,
    /// The write-intent bitmap.
    pub bitmap: Bitmap,
    /// How long a region must go unwritten before it is cleared (ns).
    pub clear_delay: AtomicU64,
    /// When the next clearing pass is due (ns of the caller's clock).
    pub clear_at: AtomicU64,
    /// Blocks written to legs by resyncs since the mirror was opened.
    pub copied: AtomicU64,
    /// The control section has work.
    pub wanted: AtomicBool,
    pub closed: AtomicBool,
    /// A change of membership could not be recorded.
    pub broken: AtomicBool,
    pub members: Mutex<Members>,
    pub control: Mutex<Control<D::Queue>>,
    /// Every queue's view slot.
    pub slots: Mutex<Vec<Arc<ViewSlot>>>,
    /// Every fanout's commands and errors per leg (the queues' and the
    /// control section's).
    pub tally: Arc<Tally>,
}

impl<D: BlockDevice> core::fmt::Debug for MirrorState<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MirrorState")
            .field("uuid", &self.uuid)
            .field("geometry", &self.geometry)
            .finish_non_exhaustive()
    }
}

impl<D: BlockDevice> MirrorState<D> {
    /// Where a write of blocks `[lba, lba + blocks)` goes now.
    pub fn route(&self, lba: u64, blocks: u64) -> Route {
        let in_sync = self.in_sync.load(SeqCst);
        let target = self.target.load(SeqCst);
        if target == 0 {
            return Route::Legs(in_sync);
        }
        let cursor = self.cursor.load(SeqCst);
        let window_end = self.window_end.load(SeqCst).max(cursor);
        let end = lba.saturating_add(blocks);
        if end <= cursor {
            // Copied already: the target takes it too.
            Route::Legs(in_sync | 1 << (target - 1))
        } else if lba >= window_end {
            // Not copied yet: the copy will carry it.
            Route::Legs(in_sync)
        } else {
            Route::Park
        }
    }
    /// Legs a flush goes to: those in sync and the one being resynced.
    pub fn flush_legs(&self) -> u32 {
        let target = self.target.load(SeqCst);
        let t = if target == 0 { 0 } else { 1 << (target - 1) };
        self.in_sync.load(SeqCst) | t
    }
    /// The generation a write finishing now must see on the legs before
    /// it completes: a leg dropped from its routing must be known dropped
    /// after a crash, or the mount could read that leg.
    pub fn needed_generation(&self) -> u64 {
        self.generation.load(Acquire)
    }
    /// True once generation `g` is on the legs.
    pub fn is_durable(&self, g: u64) -> bool {
        self.durable.load(Acquire) >= g
    }

    /// A write or flush sent when the membership generation was `sent`
    /// finished on the legs in `ok` and failed on those in `failed` (with
    /// `error`). A leg in sync that failed it is dropped if a leg in sync
    /// completed it; the write then succeeds once the drop is on the legs.
    /// If no leg in sync holds it, it fails and no leg is dropped (the legs
    /// agree it could not be done: a bad request, not a bad leg). A stale
    /// leg's failure changes nothing (it is copied in full before it is
    /// trusted), nor does the resync target's failure of a command sent
    /// before it rejoined (the resync copies what that command wrote).
    pub fn legs_failed(&self, ok: u32, failed: u32, error: DevError, sent: u64) -> bool {
        let mut m = self.members.lock();
        let survivors = ok & m.in_sync();
        for leg in (0..m.legs).filter(|l| failed & 1 << l != 0) {
            m.write_error(leg, error);
            let target = self.target.load(SeqCst) == leg as u32 + 1;
            match m.table[leg] {
                Recorded::InSync if survivors != 0 => m.fail(leg, error),
                Recorded::Stale if target && sent >= m.joined_at[leg] => {
                    self.stop_resync();
                    m.fail(leg, error);
                }
                _ => {}
            }
        }
        self.publish(&m);
        survivors != 0
    }

    /// Copies the membership state's summary into the atomics.
    pub fn publish(&self, m: &Members) {
        self.in_sync.store(m.in_sync(), SeqCst);
        self.generation.store(m.generation, Release);
        if m.generation > self.durable.load(Acquire) || !m.pending.is_empty() {
            self.wanted.store(true, Release);
        }
    }

    /// Ends the resync: the target takes no more writes.
    pub fn stop_resync(&self) {
        self.target.store(0, SeqCst);
        self.cursor.store(0, SeqCst);
        self.window_end.store(0, SeqCst);
    }

    /// Counts a failed read of `leg`.
    pub fn read_failed(&self, leg: usize, error: DevError) {
        let mut m = self.members.lock();
        if let Some(e) = m.errors.get_mut(leg) {
            e.reads += 1;
            e.last = Some(error);
        }
        m.event(super::MirrorEvent::ReadRetried { leg, error });
    }

    /// True if every queue's writes routed under a view older than `v`
    /// have finished on the legs.
    pub fn views_at_least(&self, v: u64) -> bool {
        let mut slots = self.slots.lock();
        slots.retain(|s| Arc::strong_count(s) > 1);
        slots.iter().all(|s| s.low() >= v)
    }

    /// A new slot for a queue.
    pub fn new_slot(&self) -> Arc<ViewSlot> {
        let slot = Arc::new(ViewSlot::new());
        self.slots.lock().push(slot.clone());
        slot
    }

    /// Gives leg `leg` of `fanout` a queue if it has none (its device was
    /// down when the fanout was made).
    pub fn ensure_queue(&self, fanout: &mut Fanout<D::Queue>, leg: usize) {
        if !fanout.has_queue(leg) {
            if let Some(Ok(q)) = self.legs.get(leg).map(|d| d.open_queue()) {
                fanout.set_queue(leg, q);
            }
        }
    }

    /// True if every leg is in sync and none is being resynced.
    pub fn all_in_sync(&self) -> bool {
        let all = (1u32 << self.legs.len()) - 1;
        self.in_sync.load(SeqCst) == all && self.target.load(SeqCst) == 0
    }

    /// Runs the control section if it has work (or a clearing pass is
    /// due) and nobody else is in it.
    pub fn try_control(&self, now: Nanos) {
        if !self.wanted.load(Relaxed) && now.0 < self.clear_at.load(Relaxed) {
            return;
        }
        if let Some(mut c) = self.control.try_lock() {
            c.step(now, self);
        }
    }
}
