//! [`Either`]: one device type for two kinds of device that share a frame
//! arena, so a volume can mix kinds (a RAM leg and an NVMe leg, an NVMe
//! leg over PCIe and one over TCP). Nest it for more kinds.

use super::{BlockDevice, Command, Completion, DevError, DeviceQueue, Geometry, Tag};
use crate::stats::{DeviceCounts, DeviceHealth};
use crate::units::Nanos;
use alloc::vec::Vec;

/// A device (or queue) of one of two kinds.
#[derive(Clone, Debug)]
pub enum Either<L, R> {
    /// The first kind.
    Left(L),
    /// The second kind.
    Right(R),
}

impl<L: DeviceQueue, R: DeviceQueue> DeviceQueue for Either<L, R> {
    fn submit(&mut self, command: &Command<'_>) -> Result<Tag, DevError> {
        match self {
            Either::Left(q) => q.submit(command),
            Either::Right(q) => q.submit(command),
        }
    }
    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        match self {
            Either::Left(q) => q.poll(now, max, done),
            Either::Right(q) => q.poll(now, max, done),
        }
    }
    fn in_flight(&self) -> usize {
        match self {
            Either::Left(q) => q.in_flight(),
            Either::Right(q) => q.in_flight(),
        }
    }
}

impl<L: BlockDevice, R: BlockDevice<Frames = L::Frames>> BlockDevice for Either<L, R> {
    type Queue = Either<L::Queue, R::Queue>;
    type Frames = L::Frames;
    fn geometry(&self) -> Geometry {
        match self {
            Either::Left(d) => d.geometry(),
            Either::Right(d) => d.geometry(),
        }
    }
    fn frames(&self) -> &L::Frames {
        match self {
            Either::Left(d) => d.frames(),
            Either::Right(d) => d.frames(),
        }
    }
    fn open_queue(&self) -> Result<Self::Queue, DevError> {
        Ok(match self {
            Either::Left(d) => Either::Left(d.open_queue()?),
            Either::Right(d) => Either::Right(d.open_queue()?),
        })
    }
    fn health(&self) -> DeviceHealth {
        match self {
            Either::Left(d) => d.health(),
            Either::Right(d) => d.health(),
        }
    }
    fn leg_counts(&self) -> Vec<DeviceCounts> {
        match self {
            Either::Left(d) => d.leg_counts(),
            Either::Right(d) => d.leg_counts(),
        }
    }
}
