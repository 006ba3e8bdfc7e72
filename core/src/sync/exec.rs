//! Running engine futures for synchronous callers.
//!
//! The engine's operations are futures so that a test executor can choose
//! every interleaving. Synchronous callers run them with [`block_on`], which
//! polls in a loop like an SPDK reactor: between polls it calls the caller's
//! [`Idle`] hook (which may poll the device queue or yield the thread).

use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll, Waker};

/// What `block_on` does while the future is pending.
pub trait Idle {
    /// Called after each pending poll.
    fn idle(&mut self);
}

impl<F: FnMut()> Idle for F {
    fn idle(&mut self) {
        self()
    }
}

/// Polls `future` to completion on this thread, calling `idle` between polls.
/// Busy polling is the point: completions are found by polling, not by
/// interrupts, so the waker has nothing to do.
pub fn block_on<F: Future>(future: F, mut idle: impl Idle) -> F::Output {
    let mut future = pin!(future);
    let waker = Waker::noop();
    let mut cx = Context::from_waker(waker);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        idle.idle();
    }
}

/// A future that is pending exactly once: an explicit scheduling point.
pub async fn yield_now() {
    let mut yielded = false;
    core::future::poll_fn(|cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}
