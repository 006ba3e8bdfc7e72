//! Poisoned handles. The engine's locks are spin locks, which do not
//! poison: after a panic caught at the boundary ([`crate::error`]), a
//! handle would go on serving whatever state the panic left half-changed.
//! So a panic while a call holds a handle poisons that handle, and every
//! later call on it fails with `-ENOTRECOVERABLE` (what the header says).
//! A call holds a handle from [`Poison::enter`] to the end of its body:
//! the [`Held`] it gets marks the handle if it is dropped by an unwind.

use core::ops::Deref;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::error::Fail;

/// The mark of a handle an operation panicked on.
#[derive(Debug, Default)]
pub(crate) struct Poison(AtomicBool);

impl Poison {
    /// True once a call on the handle has panicked.
    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// `handle`, held for one call; `-ENOTRECOVERABLE` if a call on it
    /// panicked before. `what` names it in the message.
    pub(crate) fn enter<'a, T>(&'a self, handle: &'a T, what: &str) -> Result<Held<'a, T>, Fail> {
        if self.is_set() {
            return Err(Fail::poisoned(what));
        }
        Ok(Held {
            handle,
            poison: self,
        })
    }
}

/// A handle held by a call: dropped by a panic's unwind, it poisons the
/// handle.
#[derive(Debug)]
pub(crate) struct Held<'a, T> {
    handle: &'a T,
    poison: &'a Poison,
}

impl<T> Deref for Held<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.handle
    }
}

impl<T> Drop for Held<'_, T> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.poison.0.store(true, Ordering::Release);
        }
    }
}
