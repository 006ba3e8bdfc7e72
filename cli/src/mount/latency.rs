//! How long the FUSE requests that move data (read, write, fsync) take
//! the server: from the handler's start to its answer's hand-off, so the
//! engine's time and the adapter's, not the kernel's queueing. In kernel
//! cache mode the kernel answers cached reads itself: those never get
//! here.
//!
//! Each serving thread records into histograms of its own (behind a lock
//! only a snapshot ever contends for), so recording shares no cache line
//! between cores; [`Latencies::snapshot`] merges them. The engine records
//! no times: its cached read would pay two clock reads per call.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;

/// The requests timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Sync,
}

impl Op {
    const ALL: [Op; 3] = [Op::Read, Op::Write, Op::Sync];

    /// Its name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Sync => "sync",
        }
    }
}

/// The longest time recorded (longer ones count as this).
const HIGHEST_NS: u64 = 3_600_000_000_000;

/// A histogram of nanoseconds with 3 significant digits.
pub fn histogram() -> Option<Histogram<u64>> {
    Histogram::new_with_bounds(1, HIGHEST_NS, 3).ok()
}

/// One thread's histograms, one per [`Op`].
type Slot = Mutex<Vec<Histogram<u64>>>;

/// Every serving thread's histograms.
#[derive(Debug)]
pub struct Latencies {
    /// Tells this recorder from another's in a thread's cache.
    id: u64,
    slots: Mutex<Vec<Arc<Slot>>>,
}

thread_local! {
    /// This thread's slot, and the recorder it belongs to.
    static MINE: RefCell<Option<(u64, Arc<Slot>)>> = const { RefCell::new(None) };
}

impl Latencies {
    /// A recorder with nothing recorded.
    pub fn new() -> Latencies {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Latencies {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            slots: Mutex::new(Vec::new()),
        }
    }

    /// Records that one `op` took `took`.
    pub fn record(&self, op: Op, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(HIGHEST_NS);
        MINE.with(|mine| {
            let mut mine = mine.borrow_mut();
            if mine.as_ref().map(|(id, _)| *id) != Some(self.id) {
                let Some(slot) = self.new_slot() else { return };
                *mine = Some((self.id, slot));
            }
            if let Some((_, slot)) = mine.as_ref() {
                if let Ok(mut h) = slot.lock() {
                    if let Some(h) = h.get_mut(op as usize) {
                        h.saturating_record(ns.max(1));
                    }
                }
            }
        });
    }

    /// A slot for the calling thread, registered for snapshots.
    fn new_slot(&self) -> Option<Arc<Slot>> {
        let hists = Op::ALL
            .iter()
            .map(|_| histogram())
            .collect::<Option<Vec<_>>>()?;
        let slot = Arc::new(Mutex::new(hists));
        self.slots.lock().ok()?.push(slot.clone());
        Some(slot)
    }

    /// Every thread's record merged, by op name: `[nanoseconds, count]`
    /// for each bucket that holds any (the wire form of
    /// `pollfs_device::control::stats::FsStats::latency`).
    pub fn snapshot(&self) -> BTreeMap<String, Vec<[u64; 2]>> {
        let mut merged: Vec<Option<Histogram<u64>>> = Op::ALL.iter().map(|_| histogram()).collect();
        if let Ok(slots) = self.slots.lock() {
            for slot in slots.iter() {
                let Ok(hists) = slot.lock() else { continue };
                for (m, h) in merged.iter_mut().zip(hists.iter()) {
                    if let Some(m) = m {
                        // Same bounds: cannot fail.
                        let _ = m.add(h);
                    }
                }
            }
        }
        Op::ALL
            .iter()
            .zip(merged)
            .filter_map(|(op, h)| Some((op.name().to_string(), buckets(&h?))))
            .collect()
    }
}

impl Default for Latencies {
    fn default() -> Latencies {
        Latencies::new()
    }
}

/// The non-empty buckets of `h`: `[value, count]`.
pub fn buckets(h: &Histogram<u64>) -> Vec<[u64; 2]> {
    h.iter_recorded()
        .map(|v| [v.value_iterated_to(), v.count_at_value()])
        .collect()
}

/// A histogram holding `buckets`.
pub fn from_buckets(buckets: &[[u64; 2]]) -> Option<Histogram<u64>> {
    let mut h = histogram()?;
    for &[value, count] in buckets {
        h.saturating_record_n(value.clamp(1, HIGHEST_NS), count);
    }
    Some(h)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_threads_times_are_merged_by_op_and_survive_the_wire_form() {
        let l = Arc::new(Latencies::new());
        std::thread::scope(|s| {
            for t in 1..=3u64 {
                let l = l.clone();
                s.spawn(move || {
                    for i in 0..100 {
                        l.record(Op::Read, Duration::from_micros(t * 10 + i % 2));
                    }
                    l.record(Op::Sync, Duration::from_millis(t));
                });
            }
        });
        assert_eq!(l.slots.lock().unwrap().len(), 3, "a slot per thread");
        let snap = l.snapshot();
        let read = from_buckets(&snap["read"]).unwrap();
        assert_eq!(read.len(), 300);
        assert!(
            read.min() >= 10_000 && read.max() <= 31_100,
            "{}",
            read.max()
        );
        let sync = from_buckets(&snap["sync"]).unwrap();
        assert_eq!(sync.len(), 3);
        assert!(snap["write"].is_empty());
        // Another recorder on the same thread gets a slot of its own.
        let other = Latencies::new();
        other.record(Op::Write, Duration::from_micros(5));
        l.record(Op::Write, Duration::from_micros(7));
        assert_eq!(from_buckets(&other.snapshot()["write"]).unwrap().len(), 1);
        assert_eq!(from_buckets(&l.snapshot()["write"]).unwrap().len(), 1);
    }
}
