//! Synchronisation building blocks: spin locks for short sections, wait
//! queues for await points, and a minimal executor for synchronous callers.
//!
//! Spin locks are held only for a few instructions and never across an
//! await. Everything that can wait for a long time (a range lock, a locked
//! page, a device command) is a future that parks its waker in a
//! [`WaitQueue`].

mod exec;
mod wait;

pub use exec::{block_on, yield_now, Idle};
pub use wait::{WaitQueue, WaitQueues};

pub use spin::RwLock;

#[cfg(loom)]
pub use loom_shim::Mutex;
/// The mutex the primitives use: `spin`'s, or loom's under `cfg(loom)` so
/// loom can explore every interleaving of the range lock and wait queues.
#[cfg(not(loom))]
pub use spin::Mutex;

/// The atomics the primitives use: `core`'s, or loom's under `cfg(loom)`.
pub(crate) mod atomic {
    #[cfg(not(loom))]
    pub(crate) use core::sync::atomic::{fence, AtomicU64, AtomicUsize};
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{fence, AtomicU64, AtomicUsize};
}

#[cfg(loom)]
mod loom_shim {
    /// loom's mutex with `spin`'s interface.
    #[derive(Debug, Default)]
    pub struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        /// A mutex holding `value`.
        pub fn new(value: T) -> Mutex<T> {
            Mutex(loom::sync::Mutex::new(value))
        }
        /// Locks it (a poisoned lock is still handed out: a panic in a
        /// model already failed the model).
        pub fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
        /// Locks it if nobody holds it, as `spin`'s `try_lock` (a
        /// poisoned lock counts as held: the model has failed already).
        pub fn try_lock(&self) -> Option<loom::sync::MutexGuard<'_, T>> {
            self.0.try_lock().ok()
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
