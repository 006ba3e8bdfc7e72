//! Wait queues: where futures park their wakers until a condition changes.

use alloc::vec::Vec;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use super::Mutex;

/// A list of parked wakers. Wakers are woken all at once by [`wake_all`];
/// a waiter re-checks its condition after parking, so no wake-up is lost.
///
/// [`wake_all`]: WaitQueue::wake_all
#[derive(Debug, Default)]
pub struct WaitQueue {
    wakers: Mutex<Vec<Waker>>,
}

impl WaitQueue {
    /// An empty queue.
    pub fn new() -> WaitQueue {
        WaitQueue {
            wakers: Mutex::new(Vec::new()),
        }
    }
    /// Parks `waker` until the next [`WaitQueue::wake_all`].
    pub fn park(&self, waker: &Waker) {
        let mut w = self.wakers.lock();
        if !w.iter().any(|p| p.will_wake(waker)) {
            w.push(waker.clone());
        }
    }
    /// Wakes every parked waker.
    pub fn wake_all(&self) {
        let wakers = core::mem::take(&mut *self.wakers.lock());
        for w in wakers {
            w.wake();
        }
    }
    /// Resolves once `ready()` returns `Some`. `ready` is called before and
    /// after parking, so a change made between the two is never missed as
    /// long as the changer calls `wake_all` after making it.
    pub fn wait_until<T, F: FnMut() -> Option<T>>(&self, ready: F) -> WaitUntil<'_, F> {
        WaitUntil { queue: self, ready }
    }
}

/// Future returned by [`WaitQueue::wait_until`].
#[derive(Debug)]
pub struct WaitUntil<'a, F> {
    queue: &'a WaitQueue,
    ready: F,
}

impl<T, F: FnMut() -> Option<T> + Unpin> Future for WaitUntil<'_, F> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        if let Some(v) = (self.ready)() {
            return Poll::Ready(v);
        }
        self.queue.park(cx.waker());
        match (self.ready)() {
            Some(v) => Poll::Ready(v),
            None => Poll::Pending,
        }
    }
}

/// A fixed table of wait queues shared by many objects (like the kernel's
/// page wait table): object `key` waits on queue `key % N`. Unrelated objects
/// may share a queue; waiters re-check their own condition.
#[derive(Debug)]
pub struct WaitQueues {
    queues: Vec<WaitQueue>,
}

impl WaitQueues {
    /// A table of `n` queues (at least one).
    pub fn new(n: usize) -> WaitQueues {
        WaitQueues {
            queues: (0..n.max(1)).map(|_| WaitQueue::new()).collect(),
        }
    }
    /// The queue for `key`.
    pub fn get(&self, key: u64) -> &WaitQueue {
        let i = (key % self.queues.len() as u64) as usize;
        &self.queues[i]
    }
}
