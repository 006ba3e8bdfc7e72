//! Points inside operations where this crate's unit tests can run code of
//! their own: to crash the filesystem there, or to panic there. Only a
//! `cfg(test)` build has them; in every other build [`point`] is empty.

#[cfg(test)]
use std::cell::RefCell;

/// A point's name and what runs when it is reached.
#[cfg(test)]
type Armed = (&'static str, Box<dyn FnOnce()>);

#[cfg(test)]
thread_local! {
    /// The point armed on this thread (once: reaching it disarms it).
    static ARMED: RefCell<Option<Armed>> = const { RefCell::new(None) };
}

/// Runs `then` the next time this thread reaches `point` named `at`.
#[cfg(test)]
pub(crate) fn arm(at: &'static str, then: impl FnOnce() + 'static) {
    ARMED.with(|a| *a.borrow_mut() = Some((at, Box::new(then))));
}

/// The point named `at`: runs what a test armed for it on this thread.
#[cfg(test)]
pub(crate) fn point(at: &str) {
    let hit = ARMED.with(|a| {
        let mut armed = a.borrow_mut();
        match armed.take() {
            Some((name, then)) if name == at => Some(then),
            other => {
                *armed = other;
                None
            }
        }
    });
    if let Some(then) = hit {
        then();
    }
}

/// The point named `at`: nothing outside this crate's unit tests.
#[cfg(not(test))]
#[inline(always)]
pub(crate) fn point(_at: &str) {}
