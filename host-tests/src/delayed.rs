//! A RAM device whose commands complete only after a delay of wall-clock
//! time, like a slow disk: for checking that a task waiting on the device
//! sleeps instead of spinning.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pollfs_core::dev::ram::{RamDevice, RamFrames, RamQueue};
use pollfs_core::dev::{BlockDevice, Command, Completion, DevError, DeviceQueue, Geometry, Tag};
use pollfs_core::units::Nanos;

/// A [`RamDevice`] whose commands complete `delay` after they were
/// submitted (the delay can be changed while it runs).
#[derive(Clone, Debug)]
pub struct DelayedDevice {
    inner: RamDevice,
    delay_us: Arc<AtomicU64>,
}

impl DelayedDevice {
    /// Wraps `inner`, completing commands at once until [`set_delay`].
    ///
    /// [`set_delay`]: DelayedDevice::set_delay
    pub fn new(inner: RamDevice) -> DelayedDevice {
        DelayedDevice {
            inner,
            delay_us: Arc::default(),
        }
    }
    /// Commands submitted from now on complete `delay` later.
    pub fn set_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.delay_us.store(us, Ordering::SeqCst);
    }
}

/// A queue of a [`DelayedDevice`]: the RAM queue runs a command when its
/// time has come.
#[derive(Debug)]
pub struct DelayedQueue {
    inner: RamQueue,
    delay_us: Arc<AtomicU64>,
    /// Completions of the inner queue, each with when it may be reported.
    held: Vec<(Instant, Completion)>,
}

impl DeviceQueue for DelayedQueue {
    fn submit(&mut self, command: &Command<'_>) -> Result<Tag, DevError> {
        self.inner.submit(command)
    }
    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        let delay = Duration::from_micros(self.delay_us.load(Ordering::SeqCst));
        let arrived = Instant::now();
        let held = &mut self.held;
        self.inner
            .poll(now, usize::MAX, &mut |c| held.push((arrived + delay, c)));
        let mut n = 0;
        let at = Instant::now();
        let mut i = 0;
        while i < self.held.len() && n < max {
            if self.held[i].0 <= at {
                done(self.held.swap_remove(i).1);
                n += 1;
            } else {
                i += 1;
            }
        }
        n
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight() + self.held.len()
    }
}

impl BlockDevice for DelayedDevice {
    type Queue = DelayedQueue;
    type Frames = RamFrames;
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn frames(&self) -> &RamFrames {
        self.inner.frames()
    }
    fn open_queue(&self) -> Result<DelayedQueue, DevError> {
        Ok(DelayedQueue {
            inner: self.inner.open_queue()?,
            delay_us: self.delay_us.clone(),
            held: Vec::new(),
        })
    }
}
