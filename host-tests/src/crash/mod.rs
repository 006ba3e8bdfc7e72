//! Crash testing by simulation (CrashMonkey's method): a device that
//! records every write and flush, and builds the device images a power cut
//! could leave at any point: unflushed writes dropped, all applied, applied
//! in another order, a subset applied, or the write in flight torn at a
//! 512-byte boundary.

pub mod bitmap;
pub mod files;
pub mod run;

use std::sync::{Arc, Mutex};

use pollfs_core::dev::ram::{RamDevice, RamFrames, RamQueue};
use pollfs_core::dev::{
    BlockDevice, Command, Completion, DevError, DeviceQueue, FrameArena, Geometry, Tag,
};
use pollfs_core::units::{Nanos, PAGE_SIZE};

use crate::rng::Rng;

/// One recorded device command.
#[derive(Clone, Debug)]
pub enum Event {
    /// Bytes written at a byte offset (trims and write-zeroes record zeros).
    Write {
        /// Byte offset on the device.
        offset: u64,
        /// What was written.
        data: Vec<u8>,
        /// Durable on completion.
        fua: bool,
    },
    /// Everything completed before is durable.
    Flush,
}

/// The order in which several recording devices saw their events: one
/// entry per event, naming the device (the legs of a mirror).
pub type Order = Arc<Mutex<Vec<usize>>>;

/// A RAM device that records what is written to it.
#[derive(Clone, Debug)]
pub struct RecordingDevice {
    inner: RamDevice,
    events: Arc<Mutex<Vec<Event>>>,
    /// Where to note each event, and as which device.
    order: Option<(Order, usize)>,
    /// Whether the device offers FUA (see [`RecordingDevice::without_fua`]).
    fua: bool,
}

impl RecordingDevice {
    /// Records on top of `inner` (whose current contents are the base image).
    pub fn new(inner: RamDevice) -> RecordingDevice {
        RecordingDevice {
            inner,
            events: Arc::default(),
            order: None,
            fua: true,
        }
    }
    /// Records on top of `inner`, reporting no FUA: a write asking for it
    /// is refused, so the engine must follow durable writes with flushes.
    pub fn without_fua(inner: RamDevice) -> RecordingDevice {
        RecordingDevice {
            fua: false,
            ..RecordingDevice::new(inner)
        }
    }
    /// As [`new`](Self::new), also noting each event in `order` as device
    /// `id`.
    pub fn in_order(inner: RamDevice, order: Order, id: usize) -> RecordingDevice {
        RecordingDevice {
            order: Some((order, id)),
            ..RecordingDevice::new(inner)
        }
    }
    /// The device it records on.
    pub fn inner(&self) -> &RamDevice {
        &self.inner
    }
    /// Events so far.
    pub fn len(&self) -> usize {
        self.events.lock().expect("events lock").len()
    }
    /// True if nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A copy of the events so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().expect("events lock").clone()
    }
}

/// A queue of a [`RecordingDevice`].
#[derive(Debug)]
pub struct RecordingQueue {
    inner: RamQueue,
    dev: RamDevice,
    events: Arc<Mutex<Vec<Event>>>,
    order: Option<(Order, usize)>,
    fua: bool,
}

impl DeviceQueue for RecordingQueue {
    fn submit(&mut self, cmd: &Command<'_>) -> Result<Tag, DevError> {
        let g = self.dev.geometry();
        let bs = u64::from(g.block_size);
        if matches!(*cmd, Command::Write { fua: true, .. }) && !self.fua {
            return Err(DevError::InvalidRequest);
        }
        let event = match *cmd {
            Command::Write { lba, frames, fua } if cmd.validate(&g).is_ok() => {
                let mut data = vec![0u8; frames.len() * PAGE_SIZE];
                for (i, f) in frames.iter().enumerate() {
                    self.dev
                        .frames()
                        .read(*f, 0, &mut data[i * PAGE_SIZE..(i + 1) * PAGE_SIZE])?;
                }
                Some(Event::Write {
                    offset: lba.0 * bs,
                    data,
                    fua,
                })
            }
            Command::Deallocate { lba, blocks } | Command::WriteZeroes { lba, blocks }
                if cmd.validate(&g).is_ok() =>
            {
                Some(Event::Write {
                    offset: lba.0 * bs,
                    data: vec![0; (blocks * bs) as usize],
                    fua: false,
                })
            }
            Command::Flush => Some(Event::Flush),
            _ => None,
        };
        let tag = self.inner.submit(cmd)?;
        if let Some(e) = event {
            let mut events = self.events.lock().expect("events lock");
            events.push(e);
            if let Some((order, id)) = &self.order {
                order.lock().expect("order lock").push(*id);
            }
        }
        Ok(tag)
    }
    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        self.inner.poll(now, max, done)
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
}

impl BlockDevice for RecordingDevice {
    type Queue = RecordingQueue;
    type Frames = RamFrames;
    fn geometry(&self) -> Geometry {
        Geometry {
            fua: self.fua,
            ..self.inner.geometry()
        }
    }
    fn frames(&self) -> &RamFrames {
        self.inner.frames()
    }
    fn open_queue(&self) -> Result<RecordingQueue, DevError> {
        Ok(RecordingQueue {
            inner: self.inner.open_queue()?,
            dev: self.inner.clone(),
            events: self.events.clone(),
            order: self.order.clone(),
            fua: self.fua,
        })
    }
}

fn apply(image: &mut [u8], offset: u64, data: &[u8]) {
    let at = offset as usize;
    if let Some(dst) = image.get_mut(at..at + data.len()) {
        dst.copy_from_slice(data);
    }
}

/// The device images a crash after `events[..at]` could leave, starting
/// from `base`, each with a short description.
pub fn crash_images(
    base: &[u8],
    events: &[Event],
    at: usize,
    rng: &mut Rng,
) -> Vec<(String, Vec<u8>)> {
    let mut durable = base.to_vec();
    let mut pending: Vec<(u64, &[u8])> = Vec::new();
    for e in &events[..at] {
        match e {
            Event::Write {
                offset,
                data,
                fua: true,
            } => apply(&mut durable, *offset, data),
            Event::Write {
                offset,
                data,
                fua: false,
            } => pending.push((*offset, data)),
            Event::Flush => {
                for (o, d) in pending.drain(..) {
                    apply(&mut durable, o, d);
                }
            }
        }
    }
    let mut out = Vec::new();
    out.push((
        format!("crash after event {at}: unflushed writes lost"),
        durable.clone(),
    ));
    if !pending.is_empty() {
        let mut all = durable.clone();
        for (o, d) in &pending {
            apply(&mut all, *o, d);
        }
        out.push((
            format!("crash after event {at}: unflushed writes all landed"),
            all,
        ));
        // Another order, and a subset, of the unflushed writes.
        let mut order: Vec<usize> = (0..pending.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut reordered = durable.clone();
        let mut subset = durable.clone();
        for &i in &order {
            apply(&mut reordered, pending[i].0, pending[i].1);
            if rng.chance(50) {
                apply(&mut subset, pending[i].0, pending[i].1);
            }
        }
        out.push((
            format!("crash after event {at}: unflushed writes reordered"),
            reordered,
        ));
        out.push((
            format!("crash after event {at}: some unflushed writes landed"),
            subset,
        ));
    }
    // The write in flight at the crash, torn at a sector boundary.
    if let Some(Event::Write { offset, data, .. }) = events.get(at) {
        let sectors = data.len() / 512;
        if sectors > 1 {
            let keep = 512 * (1 + rng.below(sectors as u64 - 1) as usize);
            let mut torn = durable;
            apply(&mut torn, *offset, &data[..keep]);
            out.push((
                format!("crash during event {at}: write torn after {keep} bytes"),
                torn,
            ));
        }
    }
    out
}

/// Panics, naming `what`, unless fsck finds `dev` consistent.
pub fn assert_fsck_clean<D: BlockDevice>(dev: &D, what: &str) {
    let report = pollfs_core::persist::check(
        dev,
        pollfs_core::hosted::monotonic_clock,
        std::thread::yield_now,
    )
    .unwrap_or_else(|e| panic!("{what}: fsck could not run: {e}"));
    assert!(report.problems.is_empty(), "{what}: {:?}", report.problems);
}

/// Mounts the crash image on `dev` (recovery must succeed) and checks
/// the engine's invariants on what it recovered; `ctx` names the image in
/// a failure.
pub fn mount_checked<D: BlockDevice>(
    dev: D,
    config: pollfs_core::Config,
    ctx: &str,
) -> pollfs_core::Fs<D> {
    let fs = pollfs_core::Fs::mount(dev, config)
        .unwrap_or_else(|e| panic!("{ctx}: recovery failed: {e}"));
    fs.check_invariants()
        .unwrap_or_else(|e| panic!("{ctx}: {e:?}"));
    fs
}

/// A RAM device holding `image`.
pub fn device_from(image: &[u8], frames: u32) -> RamDevice {
    let dev = RamDevice::new(image.len() as u64, 4096, frames).expect("ram device");
    dev.write_raw(0, image);
    dev
}
