//! Hybrid polling for futures under an async runtime
//! ([`Config::park`](pollfs_core::Config)): a timer thread of this crate's
//! wakes a waiting task after a growing delay, so that a task waiting on a
//! slow device does not spin a core.

use std::collections::BinaryHeap;
use std::sync::{Condvar, Mutex, OnceLock};
use std::task::Waker;
use std::time::{Duration, Instant};

/// Polls a waiting future's device queue again at once this many times
/// before the timer takes over: most commands on a fast device complete
/// within them.
const SPIN_POLLS: u32 = 16;
/// The first timer delay, and the longest.
const FIRST_DELAY: Duration = Duration::from_micros(20);
const MAX_DELAY: Duration = Duration::from_millis(1);

/// Hybrid polling (like the kernel's NVMe hybrid poll): the first polls
/// of a wait for the device come back at once; after that the task sleeps
/// and is woken from a timer thread after a delay that doubles from 20 us
/// to at most 1 ms. A task waiting on a slow device costs a few hundred
/// wake-ups a second instead of a core.
pub fn hybrid_park(waker: &Waker, polls: u32) {
    if polls < SPIN_POLLS {
        waker.wake_by_ref();
        return;
    }
    let shift = (polls - SPIN_POLLS).min(16);
    let delay = FIRST_DELAY.saturating_mul(1 << shift).min(MAX_DELAY);
    timer().wake_at(Instant::now() + delay, waker.clone());
}

/// A waker due at an instant (ordered soonest first in a max-heap).
struct Due(Instant, u64, Waker);

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        (self.0, self.1) == (other.0, other.1)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Due) -> std::cmp::Ordering {
        (other.0, other.1).cmp(&(self.0, self.1))
    }
}

/// One thread that wakes wakers when they are due.
struct Timer {
    due: Mutex<(BinaryHeap<Due>, u64)>,
    changed: Condvar,
}

fn timer() -> &'static Timer {
    static TIMER: Timer = Timer {
        due: Mutex::new((BinaryHeap::new(), 0)),
        changed: Condvar::new(),
    };
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("pollfs-timer".into())
            .spawn(|| TIMER.run());
        if spawned.is_err() {
            // No thread: wake everything at once instead (busy polling).
            if let Ok(mut due) = TIMER.due.lock() {
                due.1 = u64::MAX;
            }
        }
    });
    &TIMER
}

impl Timer {
    fn wake_at(&self, at: Instant, waker: Waker) {
        let Ok(mut due) = self.due.lock() else {
            waker.wake();
            return;
        };
        if due.1 == u64::MAX {
            drop(due);
            waker.wake();
            return;
        }
        due.1 += 1;
        let seq = due.1;
        let soonest = due.0.peek().is_none_or(|d| at < d.0);
        due.0.push(Due(at, seq, waker));
        if soonest {
            self.changed.notify_one();
        }
    }

    fn run(&self) {
        let Ok(mut due) = self.due.lock() else {
            return;
        };
        loop {
            let now = Instant::now();
            while due.0.peek().is_some_and(|d| d.0 <= now) {
                if let Some(d) = due.0.pop() {
                    d.2.wake();
                }
            }
            let wait = due.0.peek().map(|d| d.0 - now);
            due = match wait {
                Some(w) => match self.changed.wait_timeout(due, w) {
                    Ok((g, _)) => g,
                    Err(_) => return,
                },
                None => match self.changed.wait(due) {
                    Ok(g) => g,
                    Err(_) => return,
                },
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn early_polls_wake_at_once_later_ones_from_the_timer() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        hybrid_park(&waker, 0);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "woken at once");
        hybrid_park(&waker, SPIN_POLLS + 3);
        // Woken from the timer thread within its delay (160 us); wait for
        // it on the count itself, with a generous bound.
        let start = Instant::now();
        while count.0.load(Ordering::SeqCst) < 2 {
            assert!(start.elapsed() < Duration::from_secs(10), "never woken");
            std::thread::yield_now();
        }
    }
}
