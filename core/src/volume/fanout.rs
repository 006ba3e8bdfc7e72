//! One queue on each leg, and the bookkeeping that turns leg completions
//! back into the volume operations they belong to.
//!
//! A volume queue sends pieces of its operations to legs with [`Fanout::send`]
//! and learns, from [`Fanout::poll`], which operation's piece finished on
//! which leg and how. A leg whose queue is full keeps the piece in a backlog
//! (a copy of the command, frames and all) and sends it when a later poll
//! finds room, so a volume operation is never half submitted. Each leg's
//! pieces go out in the order they were sent.
//!
//! Each fanout counts what it sends to each leg, and each leg's refusals
//! and failures, in a block of its own in the volume's [`Tally`].

use alloc::collections::{BTreeMap, VecDeque};
use alloc::sync::Arc;
use alloc::vec::Vec;

use super::tally::{Block, Tally};
use crate::dev::{Command, DevError, DeviceQueue, OwnedCommand, Tag};
use crate::units::Nanos;

#[derive(Debug)]
struct Leg<Q> {
    /// `None` if the leg could not give a queue (a dead controller): every
    /// piece sent to it fails at once.
    queue: Option<Q>,
    /// Leg tag -> operation.
    tags: BTreeMap<Tag, u32>,
    /// Pieces waiting for room on the leg, oldest first.
    backlog: VecDeque<(u32, OwnedCommand)>,
}

/// Queues on every leg of a volume.
#[derive(Debug)]
pub(crate) struct Fanout<Q> {
    legs: Vec<Leg<Q>>,
    tally: Arc<Tally>,
    /// This fanout's counters in `tally`.
    counts: Arc<Block>,
}

impl<Q: DeviceQueue> Fanout<Q> {
    /// One entry per leg, in leg order, counting into `tally`.
    pub(crate) fn new(queues: Vec<Option<Q>>, tally: Arc<Tally>) -> Fanout<Q> {
        Fanout {
            counts: tally.open(),
            tally,
            legs: queues
                .into_iter()
                .map(|queue| Leg {
                    queue,
                    tags: BTreeMap::new(),
                    backlog: VecDeque::new(),
                })
                .collect(),
        }
    }
    /// The tally this fanout counts into.
    pub(crate) fn tally(&self) -> Arc<Tally> {
        self.tally.clone()
    }
    /// True if leg `leg` has a queue.
    pub(crate) fn has_queue(&self, leg: usize) -> bool {
        self.legs.get(leg).is_some_and(|l| l.queue.is_some())
    }
    /// Gives leg `leg` a queue (after a leg that had none comes back).
    pub(crate) fn set_queue(&mut self, leg: usize, queue: Q) {
        if let Some(l) = self.legs.get_mut(leg) {
            l.queue = Some(queue);
        }
    }
    /// Sends `cmd` to leg `leg` as a piece of operation `op`. `Ok` means a
    /// completion for it will come from [`poll`](Self::poll); an error
    /// means the leg refused it and none will.
    pub(crate) fn send(&mut self, leg: usize, op: u32, cmd: &Command<'_>) -> Result<(), DevError> {
        let l = self.legs.get_mut(leg).ok_or(DevError::InvalidRequest)?;
        let Some(queue) = l.queue.as_mut() else {
            self.counts.error(leg);
            return Err(DevError::ControllerFailed);
        };
        if l.backlog.is_empty() {
            match queue.submit(cmd) {
                Ok(tag) => {
                    l.tags.insert(tag, op);
                    self.counts.command(leg, cmd.kind(), cmd.data_bytes());
                    return Ok(());
                }
                Err(DevError::QueueFull) => {}
                Err(e) => {
                    self.counts.error(leg);
                    return Err(e);
                }
            }
        }
        l.backlog.push_back((op, OwnedCommand::of(cmd)));
        Ok(())
    }
    /// Sends what waits in the backlogs, then reaps up to `max` completions
    /// from each leg, handing `(operation, leg, result)` to `done`. Returns
    /// how many pieces finished (refused backlog pieces included).
    pub(crate) fn poll(
        &mut self,
        now: Nanos,
        max: usize,
        done: &mut dyn FnMut(u32, usize, Result<(), DevError>),
    ) -> usize {
        let mut n = 0;
        let counts = &*self.counts;
        for (i, l) in self.legs.iter_mut().enumerate() {
            let Some(queue) = l.queue.as_mut() else {
                continue;
            };
            while let Some((op, owned)) = l.backlog.front() {
                let cmd = owned.command();
                match queue.submit(&cmd) {
                    Ok(tag) => {
                        l.tags.insert(tag, *op);
                        counts.command(i, cmd.kind(), cmd.data_bytes());
                    }
                    Err(DevError::QueueFull) => break,
                    Err(e) => {
                        counts.error(i);
                        done(*op, i, Err(e));
                        n += 1;
                    }
                }
                l.backlog.pop_front();
            }
            let tags = &mut l.tags;
            n += queue.poll(now, max, &mut |c| {
                // A completion for a tag never handed out is the leg's bug;
                // dropping it is safer than inventing an owner.
                if let Some(op) = tags.remove(&c.tag) {
                    if c.result.is_err() {
                        counts.error(i);
                    }
                    done(op, i, c.result);
                }
            });
        }
        n
    }
}

impl<Q> Drop for Fanout<Q> {
    fn drop(&mut self) {
        self.tally.close(&self.counts);
    }
}
