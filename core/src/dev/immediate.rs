//! A queue for devices that execute each command when it is submitted (the
//! RAM and file devices): the command runs at once, and its completion
//! waits for the next `poll`, so the engine sees the same submit-then-poll
//! protocol as on NVMe.

use alloc::collections::VecDeque;
use alloc::sync::Arc;

use super::{Command, Completion, DevError, DeviceQueue, Geometry, Tag};
use crate::units::Nanos;

/// Something that runs device commands synchronously.
pub trait Execute: Send + Sync {
    /// The device's geometry (for the queue depth).
    fn geometry(&self) -> Geometry;
    /// Runs `command` to completion.
    fn execute(&self, command: &Command<'_>) -> Result<(), DevError>;
}

/// A queue whose commands run on submission.
#[derive(Debug)]
pub struct ImmediateQueue<X> {
    medium: Arc<X>,
    done: VecDeque<Completion>,
    next_tag: u32,
}

impl<X: Execute> ImmediateQueue<X> {
    /// A queue on `medium`.
    pub fn new(medium: Arc<X>) -> ImmediateQueue<X> {
        ImmediateQueue {
            medium,
            done: VecDeque::new(),
            next_tag: 0,
        }
    }
}

impl<X: Execute> DeviceQueue for ImmediateQueue<X> {
    fn submit(&mut self, command: &Command<'_>) -> Result<Tag, DevError> {
        if self.done.len() >= self.medium.geometry().queue_depth as usize {
            return Err(DevError::QueueFull);
        }
        let tag = Tag(self.next_tag);
        self.next_tag = self.next_tag.wrapping_add(1);
        let result = self.medium.execute(command);
        self.done.push_back(Completion { tag, result });
        Ok(tag)
    }
    fn poll(&mut self, _now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        let mut n = 0;
        while n < max {
            let Some(c) = self.done.pop_front() else {
                break;
            };
            done(c);
            n += 1;
        }
        n
    }
    fn in_flight(&self) -> usize {
        self.done.len()
    }
}
