//! How a resync knows that no write it cannot see is still under way.
//!
//! A resync copies the mirror in windows. Before it reads a window from a
//! leg in sync, every write that was routed *without* the leg being copied
//! and that may land in the window must have finished on the legs,
//! otherwise the copy could read the old bytes and the write never reach
//! the copied leg. Writes routed after the window was announced see it and
//! wait (they park) or include the leg.
//!
//! The mirror keeps a *view* counter, bumped after every change of routing
//! the resync makes. Every queue registers each write it routes under the
//! view it read, and publishes the oldest view among its writes still on
//! the legs (`u64::MAX` when none) in its own [`ViewSlot`]. The resync, after
//! bumping the view to `v`, waits until every slot shows at least `v`.
//!
//! The race between a queue routing under an old view and the resync
//! bumping it is closed Dekker-style, all `SeqCst`: the queue publishes
//! (store) and then reads the view again (load), redoing the routing if it
//! moved; the resync bumps the view (read-modify-write) and then reads the
//! slots (load). One of the two sees the other. A queue stores to its slot
//! only when its oldest registered view changes (from none to some, on
//! completion of the oldest), so the slot's cache line is the queue's own
//! and the resync only reads it.

use alloc::collections::VecDeque;
use alloc::sync::Arc;

use crate::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::SeqCst;

/// One queue's published oldest view, on its own cache line.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct ViewSlot {
    low: AtomicU64,
}

impl ViewSlot {
    pub(crate) fn new() -> ViewSlot {
        ViewSlot {
            low: AtomicU64::new(u64::MAX),
        }
    }
    /// The oldest view among the queue's writes on the legs.
    pub(crate) fn low(&self) -> u64 {
        self.low.load(SeqCst)
    }
}

/// A queue's registered writes, by the view they were routed under.
#[derive(Debug)]
pub(crate) struct Views {
    /// `(view, writes)`, oldest view first (views only grow).
    tracked: VecDeque<(u64, u32)>,
    slot: Arc<ViewSlot>,
}

impl Views {
    pub(crate) fn new(slot: Arc<ViewSlot>) -> Views {
        Views {
            tracked: VecDeque::new(),
            slot,
        }
    }
    fn publish(&self) {
        let low = self.tracked.front().map_or(u64::MAX, |&(v, _)| v);
        self.slot.low.store(low, SeqCst);
    }
    /// A write routed under view `v` is going to the legs.
    pub(crate) fn register(&mut self, v: u64) {
        match self.tracked.back_mut() {
            Some((last, n)) if *last == v => *n += 1,
            _ => self.tracked.push_back((v, 1)),
        }
        if self.tracked.len() == 1 && self.tracked[0].1 == 1 {
            self.publish();
        }
    }
    /// A write registered under view `v` has finished on every leg.
    pub(crate) fn deregister(&mut self, v: u64) {
        let Some(i) = self.tracked.iter().position(|&(w, _)| w == v) else {
            return;
        };
        self.tracked[i].1 -= 1;
        if self.tracked[i].1 == 0 {
            self.tracked.remove(i);
            if i == 0 {
                self.publish();
            }
        }
    }
}

impl Drop for Views {
    fn drop(&mut self) {
        // The queue's leg queues are gone with it; nothing it sent can
        // still be waited for.
        self.tracked.clear();
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_shows_the_oldest_view_still_on_the_legs() {
        let slot = Arc::new(ViewSlot::new());
        let mut v = Views::new(slot.clone());
        assert_eq!(slot.low(), u64::MAX);
        v.register(3);
        v.register(3);
        v.register(5);
        assert_eq!(slot.low(), 3);
        v.deregister(5);
        assert_eq!(slot.low(), 3);
        v.deregister(3);
        assert_eq!(slot.low(), 3, "one write of view 3 is still out");
        v.register(5);
        v.deregister(3);
        assert_eq!(slot.low(), 5);
        v.deregister(5);
        assert_eq!(slot.low(), u64::MAX);
        v.register(9);
        drop(v);
        assert_eq!(slot.low(), u64::MAX, "a dropped queue holds nothing up");
    }
}
