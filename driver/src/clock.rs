//! The caller's clock.
//!
//! Only the blocking admin sequences (bring-up, reset, queue creation and
//! the transport's own connection steps) read it, to bound their waits.
//! The I/O path never does: `poll` takes the time as an argument, so
//! tests can drive time.

use pollfs_core::units::Nanos;

/// A monotonic clock.
pub trait Clock: Send + Sync {
    /// Monotonic time now.
    fn now(&self) -> Nanos;
}

impl<F: Fn() -> Nanos + Send + Sync> Clock for F {
    fn now(&self) -> Nanos {
        self()
    }
}
