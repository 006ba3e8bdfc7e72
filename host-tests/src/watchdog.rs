//! A watchdog for concurrency tests: each worker says what it is doing; if
//! the whole test makes no progress for too long, the watchdog prints every
//! worker's current operation and ends the process with a failure, so a
//! deadlock fails the test instead of hanging CI.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct State {
    ops: Mutex<Vec<String>>,
    progress: AtomicU64,
    done: AtomicBool,
}

/// The watchdog; workers get a [`Worker`] each.
#[derive(Debug)]
pub struct Watchdog {
    state: Arc<State>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// One worker's line to the watchdog.
#[derive(Clone, Debug)]
pub struct Worker {
    state: Arc<State>,
    id: usize,
}

impl Worker {
    /// Records that the worker is starting `op`.
    pub fn doing(&self, op: impl Into<String>) {
        if let Ok(mut ops) = self.state.ops.lock() {
            ops[self.id] = op.into();
        }
        self.state.progress.fetch_add(1, Ordering::Relaxed);
    }
}

impl Watchdog {
    /// Starts a watchdog over `workers` workers that fails the process when
    /// nothing progresses for `stall`.
    pub fn start(workers: usize, stall: Duration) -> (Watchdog, Vec<Worker>) {
        let state = Arc::new(State {
            ops: Mutex::new(vec![String::from("(not started)"); workers]),
            ..State::default()
        });
        let s = state.clone();
        let thread = std::thread::spawn(move || {
            let mut last = u64::MAX;
            let mut since = Instant::now();
            while !s.done.load(Ordering::Relaxed) {
                std::thread::park_timeout(Duration::from_millis(50));
                let now = s.progress.load(Ordering::Relaxed);
                if now != last {
                    last = now;
                    since = Instant::now();
                } else if since.elapsed() > stall {
                    eprintln!("watchdog: no progress for {stall:?}; stuck operations:");
                    if let Ok(ops) = s.ops.lock() {
                        for (i, op) in ops.iter().enumerate() {
                            eprintln!("  worker {i}: {op}");
                        }
                    }
                    std::process::exit(101);
                }
            }
        });
        let handles = (0..workers)
            .map(|id| Worker {
                state: state.clone(),
                id,
            })
            .collect();
        (
            Watchdog {
                state,
                thread: Some(thread),
            },
            handles,
        )
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.state.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
