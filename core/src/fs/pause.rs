//! Pausing the log's background step: a user that must see the engine
//! with nothing in flight (an invariant check) stops new steps and waits
//! for the one in progress, whoever drives it (the hosted log thread or a
//! reactor's idle loop).
//!
//! Two counters, both sequentially consistent: a step counts itself
//! running and then looks for a pause; a pause counts itself and then
//! waits for running steps. Either the step sees the pause (and does not
//! run), or the pause sees the step (and waits for it to end).

use core::sync::atomic::{AtomicUsize, Ordering};

/// Whether background steps may run, and how many do.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    paused: AtomicUsize,
    running: AtomicUsize,
}

impl Gate {
    /// Lets a step in, unless paused: the step runs while the returned
    /// value lives.
    pub(crate) fn enter(&self) -> Option<Running<'_>> {
        self.running.fetch_add(1, Ordering::SeqCst);
        if self.paused.load(Ordering::SeqCst) > 0 {
            self.running.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Running(self))
    }

    /// Keeps new steps out and waits (calling `idle` between looks) until
    /// none runs. Must not be called by a thread in the middle of driving
    /// a step: it would wait for itself.
    pub(crate) fn pause(&self, idle: fn()) -> Paused<'_> {
        self.paused.fetch_add(1, Ordering::SeqCst);
        while self.running.load(Ordering::SeqCst) > 0 {
            idle();
        }
        Paused(self)
    }
}

/// A step in progress; it ends when this drops.
#[derive(Debug)]
pub(crate) struct Running<'a>(&'a Gate);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Background steps stay paused while this lives (see
/// [`Fs::pause_background`](super::Fs::pause_background)).
#[derive(Debug)]
#[must_use = "steps resume as soon as this is dropped"]
pub struct Paused<'a>(&'a Gate);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.0.paused.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Gate;

    #[test]
    fn a_pause_keeps_steps_out_until_it_drops() {
        let gate = Gate::default();
        let step = gate.enter().unwrap();
        drop(step);
        let pause = gate.pause(|| {});
        assert!(gate.enter().is_none(), "no step starts while paused");
        let again = gate.pause(|| {});
        drop(pause);
        assert!(gate.enter().is_none(), "another pause still holds");
        drop(again);
        assert!(gate.enter().is_some());
    }
}
