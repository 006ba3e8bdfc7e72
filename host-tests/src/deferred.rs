//! A device whose commands reach the medium only when its queue is polled,
//! some at each poll, in an order a seed chooses: commands really are in
//! flight, and overtake one another, as on an NVMe controller. (The RAM
//! device runs each command inside `submit`.)

use pollfs_core::dev::{
    BlockDevice, Completion, DevError, DeviceQueue, Geometry, OwnedCommand, Tag,
};
use pollfs_core::units::Nanos;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::rng::Rng;

/// Wraps `inner` so its commands run late and out of order.
#[derive(Clone, Debug)]
pub struct DeferredDevice<D> {
    inner: D,
    seed: u64,
    /// Queues opened so far: each gets its own stream of choices.
    queues: Arc<AtomicU64>,
}

impl<D: BlockDevice> DeferredDevice<D> {
    /// `inner`, with queues whose choices follow `seed`.
    pub fn new(inner: D, seed: u64) -> DeferredDevice<D> {
        DeferredDevice {
            inner,
            seed,
            queues: Arc::default(),
        }
    }
    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }
}

/// A queue of a [`DeferredDevice`].
#[derive(Debug)]
pub struct DeferredQueue<Q> {
    inner: Q,
    rng: Rng,
    next_tag: u32,
    /// Commands not yet run, with their tags.
    waiting: Vec<(Tag, OwnedCommand)>,
    depth: usize,
}

impl<Q: DeviceQueue> DeviceQueue for DeferredQueue<Q> {
    fn submit(&mut self, command: &pollfs_core::dev::Command<'_>) -> Result<Tag, DevError> {
        if self.waiting.len() >= self.depth {
            return Err(DevError::QueueFull);
        }
        let tag = Tag(self.next_tag);
        self.next_tag = self.next_tag.wrapping_add(1);
        self.waiting.push((tag, OwnedCommand::of(command)));
        Ok(tag)
    }
    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        let run = (self.rng.below(self.waiting.len() as u64 + 1) as usize).min(max);
        for _ in 0..run {
            let i = self.rng.below(self.waiting.len() as u64) as usize;
            let (tag, cmd) = self.waiting.swap_remove(i);
            let result = self.inner.submit(&cmd.command()).and_then(|inner| {
                let mut result = Err(DevError::Timeout);
                self.inner.poll(now, usize::MAX, &mut |c| {
                    if c.tag == inner {
                        result = c.result;
                    }
                });
                result
            });
            done(Completion { tag, result });
        }
        run
    }
    fn in_flight(&self) -> usize {
        self.waiting.len()
    }
}

impl<D: BlockDevice> BlockDevice for DeferredDevice<D> {
    type Queue = DeferredQueue<D::Queue>;
    type Frames = D::Frames;
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn frames(&self) -> &D::Frames {
        self.inner.frames()
    }
    fn open_queue(&self) -> Result<Self::Queue, DevError> {
        Ok(DeferredQueue {
            inner: self.inner.open_queue()?,
            rng: Rng::new(self.seed ^ self.queues.fetch_add(1, Ordering::Relaxed) << 32),
            next_tag: 0,
            waiting: Vec::new(),
            depth: self.inner.geometry().queue_depth as usize,
        })
    }
}
