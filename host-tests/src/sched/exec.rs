//! The deterministic executor: one thread, every choice from [`Choices`].
//!
//! At each step the executor lists what could happen next (poll a woken
//! task, or execute one of the commands the device holds) and lets the
//! schedule pick one. A task's waker only sets the task's flag; a task that
//! is not woken is never polled, so a lost wake-up shows as a task that
//! stays asleep forever. Inside a poll, the device's frame arena may call
//! [`preempt_point`], where the schedule can run other tasks before the
//! current one continues: the single thread then behaves like a thread that
//! lost its CPU between two instructions.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use super::choice::Choices;
use super::device::Controller;

/// A task: a future that records its own results.
pub type Task = Pin<Box<dyn Future<Output = ()>>>;

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One thing the executor did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Polled task `n`.
    Poll(usize),
    /// Polled task `.1` while task `.0` was preempted inside a frame copy.
    Preempt(usize, usize),
    /// Executed and completed a held device command.
    Complete,
}

/// A logical clock shared with the tasks: it ticks at every executor step
/// and every operation start and end, so intervals are exact and strict.
#[derive(Clone, Debug, Default)]
pub struct Clock(Rc<Cell<u64>>);

impl Clock {
    /// Advances the clock and returns the new time.
    pub fn tick(&self) -> u64 {
        let t = self.0.get() + 1;
        self.0.set(t);
        t
    }
    /// The current time.
    pub fn now(&self) -> u64 {
        self.0.get()
    }
}

/// Why a run did not reach quiescence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stuck {
    /// No task is woken and the device holds no command.
    Deadlock,
    /// The step budget ran out (a livelock, or a wait that never ends).
    Budget,
}

/// The executor state for one run.
pub struct Exec {
    tasks: RefCell<Vec<Option<Task>>>,
    flags: Vec<Arc<Flag>>,
    done: RefCell<Vec<bool>>,
    choices: RefCell<Choices>,
    ctl: Controller,
    clock: Clock,
    /// What happened, with the device command's description for completions.
    pub trace: RefCell<Vec<(u64, Action, String)>>,
    current: Cell<Option<usize>>,
    nested: Cell<bool>,
    preempt_percent: u64,
}

impl std::fmt::Debug for Exec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exec")
            .field("tasks", &self.flags.len())
            .field("clock", &self.clock.now())
            .finish_non_exhaustive()
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<Exec>>> = const { RefCell::new(None) };
}

/// Called by the frame arena before a copy: may run other tasks first.
pub fn preempt_point() {
    let exec = CURRENT.with(|c| c.borrow().clone());
    if let Some(exec) = exec {
        exec.preempt();
    }
}

impl Exec {
    /// An executor for `tasks`, driving the device behind `ctl`.
    pub fn new(
        tasks: Vec<Task>,
        choices: Choices,
        ctl: Controller,
        clock: Clock,
        preempt_percent: u64,
    ) -> Rc<Exec> {
        let n = tasks.len();
        Rc::new(Exec {
            tasks: RefCell::new(tasks.into_iter().map(Some).collect()),
            flags: (0..n)
                .map(|_| Arc::new(Flag(AtomicBool::new(true))))
                .collect(),
            done: RefCell::new(vec![false; n]),
            choices: RefCell::new(choices),
            ctl,
            clock,
            trace: RefCell::new(Vec::new()),
            current: Cell::new(None),
            nested: Cell::new(false),
            preempt_percent,
        })
    }

    /// What may happen next: `Some(task)` to poll it, `None` for each held
    /// command (by position).
    fn candidates(&self) -> Vec<Option<usize>> {
        let tasks = self.tasks.borrow();
        let done = self.done.borrow();
        let mut c: Vec<Option<usize>> = (0..tasks.len())
            .filter(|&i| !done[i] && tasks[i].is_some() && self.flags[i].0.load(Ordering::SeqCst))
            .map(Some)
            .collect();
        c.extend((0..self.ctl.held()).map(|_| None));
        c
    }

    /// Takes one step chosen from `cands`; `preempted` names the task
    /// paused inside a frame copy, if any.
    fn step(&self, cands: &[Option<usize>], preempted: Option<usize>) {
        let now = self.clock.tick();
        let pick = self.choices.borrow_mut().below(cands.len() as u64) as usize;
        let tasks_before = cands.iter().filter(|c| c.is_some()).count();
        match cands[pick] {
            Some(t) => {
                let action = match preempted {
                    Some(p) => Action::Preempt(p, t),
                    None => Action::Poll(t),
                };
                self.trace.borrow_mut().push((now, action, String::new()));
                self.poll_task(t);
            }
            None => {
                let i = pick - tasks_before;
                let what = self.ctl.describe(i);
                self.trace.borrow_mut().push((now, Action::Complete, what));
                self.ctl.release(i);
            }
        }
    }

    fn poll_task(&self, t: usize) {
        let Some(mut fut) = self.tasks.borrow_mut()[t].take() else {
            return;
        };
        self.flags[t].0.store(false, Ordering::SeqCst);
        let waker = Waker::from(self.flags[t].clone());
        let mut cx = Context::from_waker(&waker);
        let outer = self.current.replace(Some(t));
        let ready = fut.as_mut().poll(&mut cx).is_ready();
        self.current.set(outer);
        if ready {
            self.done.borrow_mut()[t] = true;
        } else {
            self.tasks.borrow_mut()[t] = Some(fut);
        }
    }

    fn preempt(&self) {
        let Some(current) = self.current.get() else {
            return;
        };
        if self.nested.get() || !self.choices.borrow_mut().chance(self.preempt_percent) {
            return;
        }
        self.nested.set(true);
        let steps = 1 + self.choices.borrow_mut().below(4);
        for _ in 0..steps {
            let cands = self.candidates();
            if cands.is_empty() {
                break;
            }
            self.step(&cands, Some(current));
        }
        self.nested.set(false);
    }

    /// Runs until every task has finished, or reports why it cannot.
    pub fn run(self: &Rc<Self>, max_steps: usize) -> Result<(), Stuck> {
        CURRENT.with(|c| *c.borrow_mut() = Some(self.clone()));
        let r = self.run_inner(max_steps);
        CURRENT.with(|c| *c.borrow_mut() = None);
        r
    }

    fn run_inner(&self, max_steps: usize) -> Result<(), Stuck> {
        let mut steps = 0;
        loop {
            if self.done.borrow().iter().all(|&d| d) {
                return Ok(());
            }
            let cands = self.candidates();
            if cands.is_empty() {
                return Err(Stuck::Deadlock);
            }
            if steps >= max_steps {
                return Err(Stuck::Budget);
            }
            steps += 1;
            self.step(&cands, None);
        }
    }

    /// Drops the remaining futures (after a failed run), so that what they
    /// borrow is released before the filesystem is inspected.
    pub fn clear(&self) {
        self.tasks.borrow_mut().clear();
    }
}
