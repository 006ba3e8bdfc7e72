//! Shared/exclusive byte-range locks with FIFO fairness and awaitable waits.
//!
//! Requests are kept in arrival order. A request is granted when it conflicts
//! with no earlier request, granted or still waiting. So a waiting exclusive
//! request (a truncate) holds back later overlapping shared ones, and a
//! waiting writer is never overtaken by later overlapping writers: nobody
//! starves. Requests on disjoint ranges never wait for each other.

use alloc::vec::Vec;
use core::future::Future;
use core::pin::Pin;
use core::sync::atomic::{AtomicU64, Ordering};
use core::task::{Context, Poll, Waker};

use crate::sync::Mutex;

use super::order::{Held, Level};
use crate::units::ByteRange;

/// How a range is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Many holders of overlapping ranges at once.
    Shared,
    /// One holder of any overlapping range.
    Exclusive,
}

#[derive(Debug)]
struct Request {
    id: u64,
    range: ByteRange,
    mode: Mode,
    granted: bool,
    waker: Option<Waker>,
}

impl Request {
    fn conflicts(&self, other: &Request) -> bool {
        self.range.overlaps(&other.range)
            && (self.mode == Mode::Exclusive || other.mode == Mode::Exclusive)
    }
}

/// Requests in arrival order: the oldest inline, the others on the heap.
///
/// A lock whose ranges do not overlap in time (an extent stripe, which
/// usually has one writer at a time) then keeps its whole state inside
/// itself, never in a heap buffer: the allocator puts such buffers side
/// by side, so two stripes' request lists would share a cache line, and
/// two writers on disjoint ranges would write it in turn.
#[derive(Debug, Default)]
struct Queue {
    /// The oldest request; `None` only when `rest` is empty too.
    first: Option<Request>,
    rest: Vec<Request>,
}

impl Queue {
    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }
    fn is_empty(&self) -> bool {
        self.first.is_none()
    }
    fn push(&mut self, r: Request) {
        if self.first.is_none() {
            self.first = Some(r);
        } else {
            self.rest.push(r);
        }
    }
    fn get(&self, i: usize) -> Option<&Request> {
        match i.checked_sub(1) {
            None => self.first.as_ref(),
            Some(j) => self.rest.get(j),
        }
    }
    fn get_mut(&mut self, i: usize) -> Option<&mut Request> {
        match i.checked_sub(1) {
            None => self.first.as_mut(),
            Some(j) => self.rest.get_mut(j),
        }
    }
    fn iter(&self) -> impl Iterator<Item = &Request> {
        self.first.iter().chain(self.rest.iter())
    }
    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Request> {
        self.first.iter_mut().chain(self.rest.iter_mut())
    }
    /// Removes request `id`, keeping the order; false if it is not here.
    fn remove(&mut self, id: u64) -> bool {
        if self.first.as_ref().is_some_and(|r| r.id == id) {
            self.first = if self.rest.is_empty() {
                None
            } else {
                Some(self.rest.remove(0))
            };
            return true;
        }
        match self.rest.iter().position(|r| r.id == id) {
            Some(i) => {
                self.rest.remove(i);
                true
            }
            None => false,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    /// Granted and waiting requests, in arrival order.
    requests: Queue,
}

impl State {
    /// Grants every waiting request that no earlier request blocks.
    fn grant(&mut self) {
        for i in 0..self.requests.len() {
            let Some(r) = self.requests.get(i) else {
                continue;
            };
            if r.granted {
                continue;
            }
            let blocked = self.requests.iter().take(i).any(|e| e.conflicts(r));
            if blocked {
                continue;
            }
            if let Some(r) = self.requests.get_mut(i) {
                r.granted = true;
                if let Some(w) = r.waker.take() {
                    w.wake();
                }
            }
        }
    }
    fn remove(&mut self, id: u64) {
        if self.requests.remove(id) {
            self.grant();
        }
    }
}

/// A byte-range lock. Its place in the lock order is given at construction.
#[derive(Debug)]
pub struct RangeLock {
    state: Mutex<State>,
    level: Level,
    waits: AtomicU64,
}

impl RangeLock {
    /// An unlocked range lock at `level` in the lock order.
    pub fn new(level: Level) -> RangeLock {
        RangeLock {
            state: Mutex::new(State::default()),
            level,
            waits: AtomicU64::new(0),
        }
    }

    /// Waits for `range` in `mode`. `held` tracks the caller's locks for the
    /// lock-order check. Dropping the future before it resolves withdraws
    /// the request.
    pub fn lock<'a>(&'a self, range: ByteRange, mode: Mode, held: &'a Held) -> Acquire<'a> {
        held.acquire(self.level);
        let mut acquire = self.lock_unchecked(range, mode);
        if let Some(g) = acquire.guard.as_mut() {
            g.held = Some(held);
        }
        acquire
    }

    /// Like [`RangeLock::lock`] without the lock-order bookkeeping, for a
    /// caller (the striped lock) that does it once for many stripes.
    pub(crate) fn lock_unchecked(&self, range: ByteRange, mode: Mode) -> Acquire<'_> {
        let mut st = self.state.lock();
        let id = st.next_id;
        st.next_id += 1;
        let blocked = st.requests.iter().any(|e| {
            e.range.overlaps(&range) && (mode == Mode::Exclusive || e.mode == Mode::Exclusive)
        });
        st.requests.push(Request {
            id,
            range,
            mode,
            granted: !blocked,
            waker: None,
        });
        if blocked {
            self.waits.fetch_add(1, Ordering::Relaxed);
        }
        Acquire {
            guard: Some(RangeGuard {
                lock: self,
                id,
                held: None,
            }),
            must_wait: blocked,
        }
    }

    /// Takes `range` only if that is possible without waiting.
    pub fn try_lock<'a>(
        &'a self,
        range: ByteRange,
        mode: Mode,
        held: &'a Held,
    ) -> Option<RangeGuard<'a>> {
        let mut acquire = self.lock(range, mode, held);
        let granted = {
            let st = self.state.lock();
            let id = acquire.guard.as_ref().map(|g| g.id);
            let granted = st.requests.iter().any(|r| Some(r.id) == id && r.granted);
            granted
        };
        if granted {
            acquire.guard.take()
        } else {
            None
        }
    }

    /// Releases request `id` (a guard given up with [`RangeGuard::into_id`]).
    pub(crate) fn release(&self, id: u64) {
        self.state.lock().remove(id);
    }

    /// How many requests have had to wait since creation.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    /// True if no request is granted or waiting.
    pub fn is_idle(&self) -> bool {
        self.state.lock().requests.is_empty()
    }
}

/// A granted range; released on drop.
#[derive(Debug)]
pub struct RangeGuard<'a> {
    lock: &'a RangeLock,
    id: u64,
    held: Option<&'a Held>,
}

impl RangeGuard<'_> {
    /// Gives up the guard without releasing the range; the caller releases
    /// it later with [`RangeLock::release`]. Only for guards taken without
    /// lock-order bookkeeping.
    pub(crate) fn into_id(self) -> u64 {
        let id = self.id;
        core::mem::forget(self);
        id
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        self.lock.state.lock().remove(self.id);
        if let Some(held) = self.held {
            held.release(self.lock.level);
        }
    }
}

/// Future returned by [`RangeLock::lock`].
#[derive(Debug)]
pub struct Acquire<'a> {
    /// The request; dropped (withdrawn) if this future is dropped first.
    guard: Option<RangeGuard<'a>>,
    must_wait: bool,
}

impl Acquire<'_> {
    /// True if the request conflicted with another when it was made, so
    /// awaiting it will wait.
    pub fn must_wait(&self) -> bool {
        self.must_wait
    }
}

impl<'a> Future for Acquire<'a> {
    type Output = RangeGuard<'a>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RangeGuard<'a>> {
        let Some(guard) = self.guard.as_ref() else {
            // Polled after completion: the contract says this may not happen;
            // stay pending rather than panic.
            return Poll::Pending;
        };
        // Granted when made, and grants are never taken back: no need to
        // take the lock again to look (the usual, uncontended case).
        let granted = !self.must_wait || {
            let mut st = guard.lock.state.lock();
            let granted = match st.requests.iter_mut().find(|r| r.id == guard.id) {
                Some(r) if r.granted => true,
                Some(r) => {
                    r.waker = Some(cx.waker().clone());
                    false
                }
                None => false,
            };
            granted
        };
        match (granted, self.guard.take()) {
            (true, Some(g)) => Poll::Ready(g),
            (_, g) => {
                self.guard = g;
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::block_on;
    use core::task::Context;

    fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(f).poll(&mut cx)
    }

    #[test]
    fn disjoint_exclusive_ranges_do_not_wait() {
        let l = RangeLock::new(Level::Extent);
        let (h1, h2) = (Held::new(), Held::new());
        let a = l.try_lock(ByteRange::new(0, 10), Mode::Exclusive, &h1);
        let b = l.try_lock(ByteRange::new(10, 20), Mode::Exclusive, &h2);
        assert!(a.is_some() && b.is_some());
        assert_eq!(l.waits(), 0);
    }

    #[test]
    fn waiting_exclusive_blocks_later_shared() {
        let l = RangeLock::new(Level::Extent);
        let (h1, h2, h3) = (Held::new(), Held::new(), Held::new());
        let reader = l
            .try_lock(ByteRange::new(0, 100), Mode::Shared, &h1)
            .unwrap();
        let mut writer = l.lock(ByteRange::new(50, 60), Mode::Exclusive, &h2);
        assert!(poll_once(&mut writer).is_pending());
        // A later shared request that overlaps the waiting writer must queue
        // behind it, or a stream of readers would starve the writer.
        assert!(l
            .try_lock(ByteRange::new(55, 56), Mode::Shared, &h3)
            .is_none());
        // One that does not overlap the writer goes ahead.
        assert!(l
            .try_lock(ByteRange::new(0, 10), Mode::Shared, &h3)
            .is_some());
        drop(reader);
        let w = match poll_once(&mut writer) {
            Poll::Ready(g) => g,
            Poll::Pending => panic!("writer not granted after the reader left"),
        };
        drop(w);
        assert!(l.is_idle());
    }

    #[test]
    fn dropped_waiter_withdraws_and_unblocks_others() {
        let l = RangeLock::new(Level::Extent);
        let (h1, h2, h3) = (Held::new(), Held::new(), Held::new());
        let first = l
            .try_lock(ByteRange::new(0, 10), Mode::Exclusive, &h1)
            .unwrap();
        let mut second = l.lock(ByteRange::new(0, 10), Mode::Exclusive, &h2);
        assert!(poll_once(&mut second).is_pending());
        let mut third = l.lock(ByteRange::new(5, 6), Mode::Shared, &h3);
        drop(second);
        drop(first);
        assert!(poll_once(&mut third).is_ready());
    }

    #[test]
    fn one_holder_at_a_time_keeps_the_lock_off_the_heap() {
        let l = RangeLock::new(Level::Extent);
        let h = Held::new();
        for i in 0..4 {
            let g = l.try_lock(ByteRange::new(i * 10, i * 10 + 10), Mode::Exclusive, &h);
            assert!(g.is_some());
            assert_eq!(l.state.lock().requests.rest.capacity(), 0);
        }
    }

    #[test]
    fn the_oldest_request_leaving_promotes_the_next_in_order() {
        let l = RangeLock::new(Level::Extent);
        let (h1, h2, h3) = (Held::new(), Held::new(), Held::new());
        let first = l
            .try_lock(ByteRange::new(0, 10), Mode::Exclusive, &h1)
            .unwrap();
        let mut second = l.lock(ByteRange::new(0, 10), Mode::Exclusive, &h2);
        let mut third = l.lock(ByteRange::new(5, 15), Mode::Exclusive, &h3);
        assert!(poll_once(&mut second).is_pending());
        assert!(poll_once(&mut third).is_pending());
        drop(first);
        let second = match poll_once(&mut second) {
            Poll::Ready(g) => g,
            Poll::Pending => panic!("the next request was not granted"),
        };
        assert!(
            poll_once(&mut third).is_pending(),
            "the third still waits behind the second"
        );
        drop(second);
        assert!(poll_once(&mut third).is_ready());
    }

    #[test]
    fn block_on_acquires() {
        let l = RangeLock::new(Level::Extent);
        let h = Held::new();
        let g = block_on(l.lock(ByteRange::from(0), Mode::Exclusive, &h), || {});
        drop(g);
        assert!(l.is_idle());
    }
}
