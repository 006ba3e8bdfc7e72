//! What the device may still hold only in its volatile cache, for writes
//! made durable by FUA alone.
//!
//! A write without FUA, or a trim, completes before it is durable; a flush
//! makes everything completed before it durable. A FUA write is durable on
//! completion, but nothing orders it against an earlier write or trim of
//! the same block that is still unflushed: after a power cut the older one
//! may be what the block holds (the crash harness builds that image). So a
//! FUA write to a block that may have one (the background write-home's,
//! `home`: a block freed, trimmed and given to another file since the last
//! flush) flushes first if anything completed unflushed since the last
//! flush ([`Volatile::pending`]). Counted per filesystem, not per block:
//! the write-home is off the sync path, where one flush more is cheap, and
//! in the common case (syncs whose data is all in the log, home writes by
//! FUA) nothing is pending.
//!
//! Noted where they complete: writeback and direct writes, trims of blocks
//! the journal releases, metadata writes without FUA (checkpoint frames),
//! and the step's own writes on a device without FUA. Trims of
//! `size::free_blocks` go unnoted: they happen only without a log,
//! where nothing is logged and nothing is written home.

use core::sync::atomic::{AtomicU64, Ordering};

use super::Session;
use crate::dev::{BlockDevice, Command, DevError};

/// Unflushed writes and trims, counted as epochs.
#[derive(Debug, Default)]
pub(crate) struct Volatile {
    /// Writes without FUA and trims completed, ever.
    done: AtomicU64,
    /// `done` as read before the newest completed flush was submitted:
    /// everything counted up to it is durable.
    covered: AtomicU64,
}

impl Volatile {
    /// A write without FUA, or a trim, completed (or failed: it may have
    /// reached the device anyway).
    pub(crate) fn note(&self) {
        self.done.fetch_add(1, Ordering::AcqRel);
    }

    /// True if a write or trim completed since the newest flush was
    /// submitted.
    pub(crate) fn pending(&self) -> bool {
        self.covered.load(Ordering::Acquire) < self.done.load(Ordering::Acquire)
    }
}

impl<D: BlockDevice> Session<D> {
    /// Flushes the device: every write and trim completed before it is
    /// durable after it.
    pub(crate) async fn flush(&self) -> core::result::Result<(), DevError> {
        let v = &self.fs.volatile;
        let horizon = v.done.load(Ordering::Acquire);
        self.run(&Command::Flush).await?;
        v.covered.fetch_max(horizon, Ordering::AcqRel);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Volatile;

    #[test]
    fn a_flush_covers_only_what_completed_before_it_was_submitted() {
        let v = Volatile::default();
        assert!(!v.pending());
        v.note();
        assert!(v.pending());
        // A flush submitted after one completion; another completes while
        // it is in flight: still pending once it completes.
        let horizon = v.done.load(core::sync::atomic::Ordering::Acquire);
        v.note();
        v.covered
            .fetch_max(horizon, core::sync::atomic::Ordering::AcqRel);
        assert!(v.pending());
        v.covered.fetch_max(2, core::sync::atomic::Ordering::AcqRel);
        assert!(!v.pending());
    }
}
