//! Who is in the mirror: each leg's state, the generation of that state,
//! and what happened to the legs (events, error counts).
//!
//! [`Members`] sits behind the mirror's membership lock, taken only on the
//! rare paths (a leg failing, a rejoin, a resync starting or ending, a
//! header being written, a status read). The hot path reads the atomics
//! in `MirrorState` that mirror it.

use alloc::collections::VecDeque;
use core::fmt;

use super::super::header::Recorded;
use super::super::MAX_LEGS;
use crate::dev::DevError;

/// A leg's state now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LegState {
    /// Holds every write the mirror completed; serves reads.
    InSync,
    /// Missed writes; waits to be copied from the legs in sync.
    Stale,
    /// Being copied: blocks below `copied` are in sync and take writes.
    Resyncing {
        /// Blocks copied so far, from the start of the mirror.
        copied: u64,
    },
    /// Failed a write, a flush or a header write, and was dropped.
    Failed,
}

impl fmt::Display for LegState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LegState::InSync => write!(f, "in sync"),
            LegState::Stale => write!(f, "stale (waiting for resync)"),
            LegState::Resyncing { copied } => write!(f, "resyncing ({copied} blocks copied)"),
            LegState::Failed => write!(f, "failed"),
        }
    }
}

/// Something that happened to a mirror, in the order it happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MirrorEvent {
    /// A leg failed a write, flush or header write that another leg
    /// completed, and was dropped.
    LegFailed {
        /// The leg.
        leg: usize,
        /// What it said.
        error: DevError,
    },
    /// A leg was dropped on request ([`super::Mirror::fail_leg`]).
    LegRemoved {
        /// The leg.
        leg: usize,
    },
    /// A leg failed a read; another leg was tried.
    ReadRetried {
        /// The leg that failed.
        leg: usize,
        /// What it said.
        error: DevError,
    },
    /// A leg was taken back and waits for its resync.
    Rejoined {
        /// The leg.
        leg: usize,
    },
    /// Copying to a stale leg began.
    ResyncStarted {
        /// The leg being copied to.
        leg: usize,
        /// The leg copied from.
        source: usize,
    },
    /// A leg was copied in full and flushed: it is in sync again.
    ResyncFinished {
        /// The leg.
        leg: usize,
    },
    /// A resync stopped before the end.
    ResyncStopped {
        /// The leg that was being copied to.
        leg: usize,
        /// Why.
        error: DevError,
    },
    /// The mirror's state of generation `generation` reached every leg
    /// that takes writes.
    HeadersWritten {
        /// The generation written.
        generation: u64,
    },
    /// No leg in sync could record a change of membership: writes fail
    /// from now on.
    Broken,
}

impl MirrorEvent {
    /// The leg the event is about, if it is about one (a resync's
    /// target, not its source).
    pub fn leg(&self) -> Option<usize> {
        match *self {
            MirrorEvent::LegFailed { leg, .. }
            | MirrorEvent::LegRemoved { leg }
            | MirrorEvent::ReadRetried { leg, .. }
            | MirrorEvent::Rejoined { leg }
            | MirrorEvent::ResyncStarted { leg, .. }
            | MirrorEvent::ResyncFinished { leg }
            | MirrorEvent::ResyncStopped { leg, .. } => Some(leg),
            MirrorEvent::HeadersWritten { .. } | MirrorEvent::Broken => None,
        }
    }
}

impl fmt::Display for MirrorEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MirrorEvent::LegFailed { leg, error } => {
                write!(f, "leg {leg} failed ({error}) and was dropped")
            }
            MirrorEvent::LegRemoved { leg } => write!(f, "leg {leg} was dropped on request"),
            MirrorEvent::ReadRetried { leg, error } => {
                write!(f, "leg {leg} failed a read ({error}); another leg was read")
            }
            MirrorEvent::Rejoined { leg } => {
                write!(f, "leg {leg} rejoined; it waits for its resync")
            }
            MirrorEvent::ResyncStarted { leg, source } => {
                write!(f, "resync of leg {leg} from leg {source} started")
            }
            MirrorEvent::ResyncFinished { leg } => write!(f, "leg {leg} is resynced and in sync"),
            MirrorEvent::ResyncStopped { leg, error } => {
                write!(f, "resync of leg {leg} stopped ({error})")
            }
            MirrorEvent::HeadersWritten { generation } => {
                write!(f, "state of generation {generation} recorded on the legs")
            }
            MirrorEvent::Broken => write!(
                f,
                "no leg in sync could record a change of membership: writes fail"
            ),
        }
    }
}

/// Errors seen on one leg.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LegErrors {
    /// Reads that failed (and were retried on another leg).
    pub reads: u64,
    /// Writes, flushes and header writes that failed.
    pub writes: u64,
    /// The last error.
    pub last: Option<DevError>,
}

/// Events kept for [`super::Mirror::take_events`]; older ones are dropped.
const EVENTS_KEPT: usize = 64;

/// The membership state (behind the membership lock).
#[derive(Debug)]
pub(crate) struct Members {
    /// Number of legs.
    pub legs: usize,
    /// Generation of `table` and `dirty`.
    pub generation: u64,
    /// Every leg's recorded state.
    pub table: [Recorded; MAX_LEGS],
    /// Opened for writing and not closed since.
    pub dirty: bool,
    /// For each failed leg, the generation that recorded it.
    pub failed_at: [u64; MAX_LEGS],
    /// For each leg, the generation of its last rejoin.
    pub joined_at: [u64; MAX_LEGS],
    /// Stale legs waiting for a resync, in order.
    pub pending: VecDeque<usize>,
    /// The first generation the write-intent bitmap records.
    pub since: u64,
    /// Bit per leg not in sync: it lacks nothing outside the bitmap's
    /// regions, so its resync copies only those. Set when a leg in sync
    /// leaves, or at open from the leg's own header; a leg not set is
    /// copied whole.
    pub covered: u32,
    pub errors: [LegErrors; MAX_LEGS],
    pub events: VecDeque<MirrorEvent>,
    pub on_event: Hook,
}

/// The hook events are told to, if any.
pub(crate) struct Hook(pub Option<super::EventHook>);

impl fmt::Debug for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", if self.0.is_some() { "Hook" } else { "None" })
    }
}

impl Members {
    pub fn new(
        legs: usize,
        generation: u64,
        table: [Recorded; MAX_LEGS],
        on_event: Option<super::EventHook>,
    ) -> Members {
        Members {
            legs,
            generation,
            table,
            dirty: true,
            failed_at: [0; MAX_LEGS],
            joined_at: [0; MAX_LEGS],
            pending: (0..legs).filter(|&i| table[i] == Recorded::Stale).collect(),
            since: 0,
            covered: 0,
            errors: [LegErrors::default(); MAX_LEGS],
            events: VecDeque::new(),
            on_event: Hook(on_event),
        }
    }
    /// Records `e` and tells the hook.
    pub fn event(&mut self, e: MirrorEvent) {
        if let Some(hook) = &self.on_event.0 {
            hook(&e);
        }
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }
    /// Bit mask of the legs in sync.
    pub fn in_sync(&self) -> u32 {
        (0..self.legs)
            .filter(|&i| self.table[i] == Recorded::InSync)
            .fold(0, |m, i| m | 1 << i)
    }
    /// Counts a write-side error of `leg`.
    pub fn write_error(&mut self, leg: usize, error: DevError) {
        if let Some(e) = self.errors.get_mut(leg) {
            e.writes += 1;
            e.last = Some(error);
        }
    }
    /// `leg` is about to stop taking writes: if it was in sync it lacks,
    /// from now on, only writes the bitmap records.
    pub fn leave(&mut self, leg: usize) {
        if self.table[leg] == Recorded::InSync {
            self.covered |= 1 << leg;
        }
    }
    /// Marks `leg` failed in a new generation (the caller has checked it
    /// may fail).
    pub fn fail(&mut self, leg: usize, error: DevError) {
        self.leave(leg);
        self.generation += 1;
        self.table[leg] = Recorded::Failed;
        self.failed_at[leg] = self.generation;
        self.pending.retain(|&l| l != leg);
        self.event(MirrorEvent::LegFailed { leg, error });
    }
}

/// What a mirror reports about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorStatus {
    /// The mirror's identity.
    pub uuid: u64,
    /// Generation of the membership state in memory.
    pub generation: u64,
    /// Generation known to be on every leg that takes writes.
    pub durable_generation: u64,
    /// Capacity in logical blocks.
    pub data_blocks: u64,
    /// Opened for writing and not closed since.
    pub dirty: bool,
    /// A change of membership could not be recorded: writes fail.
    pub broken: bool,
    /// Per leg, by position: its state and its errors.
    pub legs: alloc::vec::Vec<(LegState, LegErrors)>,
    /// The write-intent bitmap: bytes per region.
    pub region_bytes: u64,
    /// Regions in the mirror.
    pub regions: u32,
    /// Regions marked: written lately, or while a leg was out; a leg that
    /// returns is copied there only.
    pub dirty_regions: u32,
    /// Blocks resyncs have written to legs since the mirror was opened.
    pub resync_copied: u64,
}
