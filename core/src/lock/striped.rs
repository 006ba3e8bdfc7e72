//! A byte-range lock split into stripes, so writers to different parts of a
//! file never touch the same lock word.
//!
//! The file is cut into chunks of `CHUNK` bytes; chunk `c` belongs to stripe
//! `c % STRIPES`. A request takes, in increasing stripe order (so two
//! requests can never wait on each other in a cycle), the stripes its range
//! touches, and in each stripe the exact range, so disjoint ranges that
//! share a stripe still run in parallel. Each stripe is a FIFO-fair
//! [`RangeLock`] on its own cache line.

use super::order::{Held, Level};
use super::range::{Mode, RangeLock};
use crate::units::ByteRange;

const STRIPES: usize = 16;
const CHUNK: u64 = 64 * 1024;

/// One stripe on its own pair of cache lines (128 bytes: the adjacent-line
/// prefetcher pulls lines in pairs). The whole lock fits inside, its
/// request list included while the stripe has one request at a time, so
/// writers in different stripes never write one line.
#[derive(Debug)]
#[repr(align(128))]
struct Padded(RangeLock);

// (Under loom the mutex is loom's, of another size.)
#[cfg(not(loom))]
const _: () = assert!(core::mem::size_of::<Padded>() == 128);

/// A striped byte-range lock.
#[derive(Debug)]
pub struct StripedLock {
    stripes: [Padded; STRIPES],
    level: Level,
}

/// The stripes a range touches, in increasing order.
fn stripes_of(range: ByteRange) -> impl Iterator<Item = usize> {
    let first = range.start / CHUNK;
    let last = range.end.saturating_sub(1) / CHUNK;
    let n = last.saturating_sub(first).saturating_add(1);
    let all = n >= STRIPES as u64;
    (0..STRIPES).filter(move |&s| all || (first..=last).any(|c| (c % STRIPES as u64) as usize == s))
}

impl StripedLock {
    /// An unlocked striped lock at `level` in the lock order.
    pub fn new(level: Level) -> StripedLock {
        StripedLock {
            stripes: core::array::from_fn(|_| Padded(RangeLock::new(level))),
            level,
        }
    }

    /// Takes `range` in `mode`; returns the guards (released on drop) and
    /// whether any stripe made the caller wait.
    pub async fn lock<'a>(
        &'a self,
        range: ByteRange,
        mode: Mode,
        held: &'a Held,
    ) -> (StripedGuard<'a>, bool) {
        held.acquire(self.level);
        // Request ids per stripe, inline: this runs on every write, and the
        // guard is moved through several futures.
        let mut guard = StripedGuard {
            lock: self,
            taken: 0,
            ids: [0; STRIPES],
            held,
        };
        let mut waited = false;
        for s in stripes_of(range) {
            // Each stripe's own order check is satisfied by the check above;
            // the stripes are taken in increasing order, never nested otherwise.
            let acquire = self.stripes[s].0.lock_unchecked(range, mode);
            waited |= acquire.must_wait();
            guard.ids[s] = acquire.await.into_id();
            guard.taken |= 1 << s;
        }
        (guard, waited)
    }

    /// True if no stripe has a holder or a waiter.
    pub fn is_idle(&self) -> bool {
        self.stripes.iter().all(|p| p.0.is_idle())
    }
}

/// The stripes held for one range.
#[derive(Debug)]
pub struct StripedGuard<'a> {
    lock: &'a StripedLock,
    /// Bit `s` set: stripe `s` is held, as request `ids[s]`.
    taken: u32,
    ids: [u64; STRIPES],
    held: &'a Held,
}

impl Drop for StripedGuard<'_> {
    fn drop(&mut self) {
        for s in 0..STRIPES {
            if self.taken & (1 << s) != 0 {
                self.lock.stripes[s].0.release(self.ids[s]);
            }
        }
        self.held.release(self.lock.level);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use core::future::Future;

    #[test]
    fn ranges_map_to_the_stripes_they_touch() {
        let s: Vec<usize> = stripes_of(ByteRange::new(0, 4096)).collect();
        assert_eq!(s, [0]);
        let s: Vec<usize> = stripes_of(ByteRange::new(CHUNK - 1, CHUNK + 1)).collect();
        assert_eq!(s, [0, 1]);
        let s: Vec<usize> = stripes_of(ByteRange::new(15 * CHUNK, 16 * CHUNK + 1)).collect();
        assert_eq!(s, [0, 15]);
        assert_eq!(stripes_of(ByteRange::from(0)).count(), STRIPES);
    }

    #[test]
    fn overlapping_exclusive_ranges_exclude_each_other() {
        let l = StripedLock::new(Level::Extent);
        let (h1, h2) = (Held::new(), Held::new());
        let a = crate::sync::block_on(l.lock(ByteRange::new(0, 100), Mode::Exclusive, &h1), || {});
        let mut b = core::pin::pin!(l.lock(ByteRange::new(50, CHUNK * 3), Mode::Exclusive, &h2));
        let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
        assert!(b.as_mut().poll(&mut cx).is_pending());
        drop(a);
        assert!(b.as_mut().poll(&mut cx).is_ready());
    }
}
