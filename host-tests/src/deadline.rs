//! Worker threads under a deadline, for tests of operations that may hang.
//!
//! Unlike [`crate::watchdog`], which ends the whole process, a [`Crew`] fails
//! only its own test: each worker says what it is doing; if no operation
//! finishes for a stall period, or the run outlasts its deadline, the crew
//! cancels its workers and panics naming every stuck operation. Cancelling
//! works through the engine's idle hook: a filesystem configured with
//! [`idle`] unwinds a cancelled worker out of whatever it waits for. A worker
//! stuck in a loop that never reaches the idle hook cannot be cancelled and
//! is left behind; its test still fails on time.

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// No operation finished for this long: the work is stuck.
pub const STALL: Duration = Duration::from_secs(10);
/// The longest a crew's whole run may take.
pub const DEADLINE: Duration = Duration::from_secs(60);

thread_local! {
    static CANCEL: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// The unwind payload of a cancelled worker.
struct Cancelled;

/// An engine idle hook (`Config::idle`): yields the CPU, and unwinds out of
/// the engine once this thread's crew has been cancelled.
pub fn idle() {
    let cancelled = CANCEL.with(|c| {
        c.borrow()
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
    });
    if cancelled {
        std::panic::resume_unwind(Box::new(Cancelled));
    }
    std::thread::yield_now();
}

/// One worker's line to its crew.
#[derive(Debug)]
pub struct Hand {
    ops: Arc<Mutex<Vec<String>>>,
    progress: Arc<AtomicU64>,
    id: usize,
}

impl Hand {
    /// Records that the worker starts `op` (and so finished the one before).
    pub fn doing(&self, op: impl Into<String>) {
        self.ops.lock().expect("ops lock")[self.id] = op.into();
        self.progress.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
enum Outcome {
    Finished(Result<(), String>),
    Panicked(String),
    Cancelled,
}

fn panic_text(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic)".to_string()
    }
}

/// Named worker threads, waited for together under a deadline.
#[derive(Debug)]
pub struct Crew {
    ops: Arc<Mutex<Vec<String>>>,
    progress: Arc<AtomicU64>,
    cancel: Arc<AtomicBool>,
    names: Vec<String>,
    tx: Sender<(usize, Outcome)>,
    rx: Receiver<(usize, Outcome)>,
}

impl Default for Crew {
    fn default() -> Crew {
        Crew::new()
    }
}

impl Crew {
    /// A crew with no workers yet.
    pub fn new() -> Crew {
        let (tx, rx) = channel();
        Crew {
            ops: Arc::default(),
            progress: Arc::default(),
            cancel: Arc::default(),
            names: Vec::new(),
            tx,
            rx,
        }
    }

    /// Starts a worker named `name` running `f`; an `Err` is the worker's
    /// failure, reported by [`Crew::finish`].
    pub fn spawn(
        &mut self,
        name: &str,
        f: impl FnOnce(&Hand) -> Result<(), String> + Send + 'static,
    ) {
        let id = self.names.len();
        self.names.push(name.to_string());
        self.ops
            .lock()
            .expect("ops lock")
            .push("(starting)".to_string());
        let hand = Hand {
            ops: self.ops.clone(),
            progress: self.progress.clone(),
            id,
        };
        let cancel = self.cancel.clone();
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            CANCEL.with(|c| *c.borrow_mut() = Some(cancel));
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&hand)));
            let outcome = match r {
                Ok(r) => Outcome::Finished(r),
                Err(p) if p.is::<Cancelled>() => Outcome::Cancelled,
                Err(p) => Outcome::Panicked(panic_text(&*p)),
            };
            let _ = tx.send((id, outcome));
        });
    }

    /// Waits for every worker and returns each one's name and result.
    /// Panics if a worker panicked, if no operation finishes for `stall`, or
    /// if the run outlasts `deadline`.
    pub fn finish(self, stall: Duration, deadline: Duration) -> Vec<(String, Result<(), String>)> {
        let n = self.names.len();
        let mut results: Vec<Option<Result<(), String>>> = (0..n).map(|_| None).collect();
        let mut panics = Vec::new();
        let start = Instant::now();
        let mut seen = self.progress.load(Ordering::Relaxed);
        let mut since = Instant::now();
        let mut left = n;
        while left > 0 {
            match self.rx.recv_timeout(Duration::from_millis(50)) {
                Ok((id, outcome)) => {
                    left -= 1;
                    since = Instant::now();
                    match outcome {
                        Outcome::Finished(r) => results[id] = Some(r),
                        Outcome::Panicked(m) => {
                            panics.push(format!("{} panicked: {m}", self.names[id]))
                        }
                        Outcome::Cancelled => unreachable!("cancelled before a stall"),
                    }
                }
                Err(RecvTimeoutError::Disconnected) => unreachable!("the crew holds a sender"),
                Err(RecvTimeoutError::Timeout) => {
                    let now = self.progress.load(Ordering::Relaxed);
                    if now != seen {
                        seen = now;
                        since = Instant::now();
                    }
                    let stalled = since.elapsed() > stall;
                    if stalled || start.elapsed() > deadline {
                        let why = if stalled {
                            format!("no operation finished for {stall:?}")
                        } else {
                            format!("the run outlasted its deadline of {deadline:?}")
                        };
                        self.give_up(&why, &results, &panics);
                    }
                }
            }
        }
        assert!(panics.is_empty(), "{}", panics.join("\n"));
        self.names
            .into_iter()
            .zip(
                results
                    .into_iter()
                    .map(|r| r.expect("every worker reported")),
            )
            .collect()
    }

    fn give_up(&self, why: &str, results: &[Option<Result<(), String>>], panics: &[String]) -> ! {
        let mut msg = format!("stuck: {why}; workers:\n");
        let ops = self.ops.lock().expect("ops lock").clone();
        for (i, name) in self.names.iter().enumerate() {
            let state = match &results[i] {
                Some(Ok(())) => "finished".to_string(),
                Some(Err(e)) => format!("failed: {e}"),
                None => format!("STUCK in: {}", ops[i]),
            };
            msg.push_str(&format!("  {name}: {state}\n"));
        }
        for p in panics {
            msg.push_str(&format!("  {p}\n"));
        }
        // Unwind the stuck workers out of the engine, and give them a moment
        // so they stop using the CPU before the next test runs.
        self.cancel.store(true, Ordering::Relaxed);
        let until = Instant::now() + Duration::from_secs(5);
        let mut left = results.iter().filter(|r| r.is_none()).count();
        while left > 0 {
            let wait = until.saturating_duration_since(Instant::now());
            if self.rx.recv_timeout(wait).is_err() {
                break;
            }
            left -= 1;
        }
        panic!("{msg}");
    }
}

/// Runs `f` on one worker named `what` under [`STALL`] and [`DEADLINE`] and
/// returns its value; a panic or a hang fails the test, naming `what`.
pub fn guarded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = channel();
    let mut crew = Crew::new();
    let name = what.to_string();
    crew.spawn(what, move |h| {
        h.doing(name);
        let _ = tx.send(f());
        Ok(())
    });
    crew.finish(STALL, DEADLINE);
    rx.recv().expect("the worker sent its value")
}
