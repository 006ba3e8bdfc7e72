//! A device wrapper that fails commands on a plan, for testing error paths.
//!
//! The plan is shared ([`FaultPlan`] is cheap to clone), so a test can change
//! it while the engine runs: fail the next N writes, fail every flush, or let
//! N more commands through and fail everything after (a dying device).
//! Failed commands never reach the inner device, like a write the medium
//! rejected.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::sync::Arc;

use spin::Mutex;

use super::{BlockDevice, Command, CommandKind, Completion, DevError, DeviceQueue, Geometry, Tag};
use crate::stats::{DeviceCounts, DeviceHealth};
use crate::units::Nanos;
use alloc::vec::Vec;

#[derive(Debug, Default)]
struct Plan {
    /// Per kind: how many upcoming commands of that kind fail, and with what.
    by_kind: [(u64, Option<DevError>); 5],
    /// Commands still allowed before every command fails.
    fail_after: Option<u64>,
    /// Commands failed so far.
    injected: u64,
}

fn slot(kind: CommandKind) -> usize {
    match kind {
        CommandKind::Read => 0,
        CommandKind::Write => 1,
        CommandKind::Flush => 2,
        CommandKind::Deallocate => 3,
        CommandKind::WriteZeroes => 4,
    }
}

/// What to fail. Clones share one plan.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    plan: Arc<Mutex<Plan>>,
}

impl FaultPlan {
    /// A plan that fails nothing.
    pub fn new() -> FaultPlan {
        FaultPlan::default()
    }
    /// Fail the next `count` commands of `kind` with `error` (`u64::MAX`: all).
    pub fn fail(&self, kind: CommandKind, count: u64, error: DevError) {
        self.plan.lock().by_kind[slot(kind)] = (count, Some(error));
    }
    /// Let `n` more commands through, then fail every command with `Media`.
    pub fn fail_after(&self, n: u64) {
        self.plan.lock().fail_after = Some(n);
    }
    /// Stop failing anything.
    pub fn heal(&self) {
        let mut p = self.plan.lock();
        let injected = p.injected;
        *p = Plan::default();
        p.injected = injected;
    }
    /// How many commands have been failed so far.
    pub fn injected(&self) -> u64 {
        self.plan.lock().injected
    }
    fn decide(&self, kind: CommandKind) -> Option<DevError> {
        let mut p = self.plan.lock();
        let verdict = if let Some(left) = p.fail_after.as_mut() {
            if *left == 0 {
                Some(DevError::Media)
            } else {
                *left -= 1;
                None
            }
        } else {
            None
        };
        let verdict = verdict.or_else(|| {
            let (count, error) = &mut p.by_kind[slot(kind)];
            if *count > 0 {
                if *count != u64::MAX {
                    *count -= 1;
                }
                *error
            } else {
                None
            }
        });
        if verdict.is_some() {
            p.injected += 1;
        }
        verdict
    }
}

/// Wraps a device so its commands fail according to a [`FaultPlan`].
#[derive(Debug)]
pub struct FaultyDevice<D> {
    inner: D,
    plan: FaultPlan,
}

impl<D: BlockDevice> FaultyDevice<D> {
    /// Wraps `inner`; `plan` starts empty and can be changed at any time.
    pub fn new(inner: D, plan: FaultPlan) -> FaultyDevice<D> {
        FaultyDevice { inner, plan }
    }
    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }
}

/// A queue of a [`FaultyDevice`].
#[derive(Debug)]
pub struct FaultyQueue<Q> {
    inner: Q,
    plan: FaultPlan,
    next_tag: u32,
    /// Inner tag -> our tag, for commands the inner device is running.
    passed: BTreeMap<Tag, Tag>,
    /// Commands failed at submission, reported on the next poll.
    failed: VecDeque<Completion>,
}

impl<Q: DeviceQueue> DeviceQueue for FaultyQueue<Q> {
    fn submit(&mut self, command: &Command<'_>) -> Result<Tag, DevError> {
        let tag = Tag(self.next_tag);
        match self.plan.decide(command.kind()) {
            Some(error) => self.failed.push_back(Completion {
                tag,
                result: Err(error),
            }),
            None => {
                let inner = self.inner.submit(command)?;
                self.passed.insert(inner, tag);
            }
        }
        self.next_tag = self.next_tag.wrapping_add(1);
        Ok(tag)
    }
    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        let mut n = 0;
        while n < max {
            let Some(c) = self.failed.pop_front() else {
                break;
            };
            done(c);
            n += 1;
        }
        let passed = &mut self.passed;
        n + self.inner.poll(now, max - n, &mut |c| {
            // A completion for a tag we never passed on is the inner device's
            // bug; dropping it is safer than inventing an owner.
            if let Some(tag) = passed.remove(&c.tag) {
                done(Completion {
                    tag,
                    result: c.result,
                });
            }
        })
    }
    fn in_flight(&self) -> usize {
        self.passed.len() + self.failed.len()
    }
}

impl<D: BlockDevice> BlockDevice for FaultyDevice<D> {
    type Queue = FaultyQueue<D::Queue>;
    type Frames = D::Frames;
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn frames(&self) -> &D::Frames {
        self.inner.frames()
    }
    fn open_queue(&self) -> Result<Self::Queue, DevError> {
        Ok(FaultyQueue {
            inner: self.inner.open_queue()?,
            plan: self.plan.clone(),
            next_tag: 0,
            passed: BTreeMap::new(),
            failed: VecDeque::new(),
        })
    }
    fn health(&self) -> DeviceHealth {
        self.inner.health()
    }
    fn leg_counts(&self) -> Vec<DeviceCounts> {
        self.inner.leg_counts()
    }
}
