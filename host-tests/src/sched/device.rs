//! A RAM device whose commands complete when the schedule says so.
//!
//! `submit` only records a command; the executor later picks one of the
//! recorded commands, runs it on the RAM device and posts its completion.
//! The data moves at that moment, not at submission, as on a real device
//! that may execute a queued command at any time before completing it. The
//! frame arena calls the executor before every copy in or out of a cache
//! page: that is where a preempted thread would lose the CPU between the two
//! version loads of a lockless read, or in the middle of a writer's copy.

use std::sync::{Arc, Mutex};

use pollfs_core::dev::ram::{RamDevice, RamFrames, RamQueue};
use pollfs_core::dev::{
    BlockDevice, Command, CommandKind, Completion, DevError, DeviceQueue, FrameArena, Geometry, Tag,
};
use pollfs_core::units::{FrameId, Lba, Nanos};

/// A submitted command the device has not executed yet.
#[derive(Clone, Debug)]
struct Held {
    queue: usize,
    tag: Tag,
    kind: CommandKind,
    lba: u64,
    frames: Vec<FrameId>,
    fua: bool,
    blocks: u64,
}

impl Held {
    fn describe(&self) -> String {
        match self.kind {
            CommandKind::Read | CommandKind::Write => {
                format!("{:?} lba {} x{}", self.kind, self.lba, self.frames.len())
            }
            CommandKind::Flush => "Flush".to_string(),
            _ => format!("{:?} lba {} +{}", self.kind, self.lba, self.blocks),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Inner queues, one per session queue, and their posted completions.
    queues: Vec<(RamQueue, Vec<Completion>)>,
    held: Vec<Held>,
    /// Execute at submission (setup and final checks run synchronously).
    pass_through: bool,
}

/// The executor's handle on the device: lists and releases held commands.
#[derive(Clone, Debug, Default)]
pub struct Controller {
    state: Arc<Mutex<State>>,
}

impl Controller {
    /// Commands waiting to be executed.
    pub fn held(&self) -> usize {
        self.state.lock().unwrap().held.len()
    }

    /// A short description of held command `i`.
    pub fn describe(&self, i: usize) -> String {
        let st = self.state.lock().unwrap();
        st.held
            .get(i)
            .map(|h| format!("q{} {}", h.queue, h.describe()))
            .unwrap_or_default()
    }

    /// Executes held command `i` and posts its completion.
    pub fn release(&self, i: usize) {
        let mut st = self.state.lock().unwrap();
        if i >= st.held.len() {
            return;
        }
        let h = st.held.remove(i);
        let result = execute(&mut st.queues[h.queue].0, &h);
        st.queues[h.queue].1.push(Completion { tag: h.tag, result });
    }

    /// Sets whether commands run as soon as they are submitted.
    pub fn set_pass_through(&self, on: bool) {
        let mut st = self.state.lock().unwrap();
        st.pass_through = on;
        while !st.held.is_empty() && on {
            drop(st);
            self.release(0);
            st = self.state.lock().unwrap();
        }
    }
}

fn execute(q: &mut RamQueue, h: &Held) -> Result<(), DevError> {
    let cmd = match h.kind {
        CommandKind::Read => Command::Read {
            lba: Lba(h.lba),
            frames: &h.frames,
        },
        CommandKind::Write => Command::Write {
            lba: Lba(h.lba),
            frames: &h.frames,
            fua: h.fua,
        },
        CommandKind::Flush => Command::Flush,
        // Deallocated blocks keep their old bytes, as they may on a device
        // whose reads of deallocated blocks are unspecified: the engine
        // must never show them (a block is written or zeroed before a
        // reader can reach it).
        CommandKind::Deallocate => return Ok(()),
        CommandKind::WriteZeroes => Command::WriteZeroes {
            lba: Lba(h.lba),
            blocks: h.blocks,
        },
    };
    q.submit(&cmd)?;
    let mut result = Err(DevError::Timeout);
    q.poll(Nanos(0), 1, &mut |c| result = c.result);
    result
}

/// The device: a [`RamDevice`] behind a [`Controller`].
#[derive(Debug)]
pub struct HeldDevice {
    ram: RamDevice,
    frames: HookedFrames,
    ctl: Controller,
}

impl HeldDevice {
    /// Wraps `ram`.
    pub fn new(ram: RamDevice) -> HeldDevice {
        HeldDevice {
            frames: HookedFrames { ram: ram.clone() },
            ram,
            ctl: Controller::default(),
        }
    }

    /// The controller that releases this device's commands.
    pub fn controller(&self) -> Controller {
        self.ctl.clone()
    }
}

/// The RAM frames, with a scheduling point before each copy.
#[derive(Debug)]
pub struct HookedFrames {
    ram: RamDevice,
}

impl HookedFrames {
    fn inner(&self) -> &RamFrames {
        self.ram.frames()
    }
}

impl FrameArena for HookedFrames {
    fn frame_count(&self) -> u32 {
        self.inner().frame_count()
    }
    fn read(&self, frame: FrameId, offset: usize, dst: &mut [u8]) -> Result<(), DevError> {
        super::exec::preempt_point();
        self.inner().read(frame, offset, dst)
    }
    fn write(&self, frame: FrameId, offset: usize, src: &[u8]) -> Result<(), DevError> {
        super::exec::preempt_point();
        self.inner().write(frame, offset, src)
    }
    // Filling happens under the extent map's spin lock (holes are zeroed
    // while the map is read-locked): a preemption there would spin forever.
    fn fill(&self, frame: FrameId, offset: usize, len: usize, byte: u8) -> Result<(), DevError> {
        self.inner().fill(frame, offset, len, byte)
    }
}

/// A session's queue: records commands instead of running them.
#[derive(Debug)]
pub struct HeldQueue {
    ctl: Controller,
    index: usize,
    next_tag: u32,
    depth: usize,
}

impl DeviceQueue for HeldQueue {
    fn submit(&mut self, command: &Command<'_>) -> Result<Tag, DevError> {
        if self.in_flight() >= self.depth {
            return Err(DevError::QueueFull);
        }
        let tag = Tag(self.next_tag);
        self.next_tag = self.next_tag.wrapping_add(1);
        let (lba, frames, fua, blocks) = match *command {
            Command::Read { lba, frames } => (lba.0, frames.to_vec(), false, 0),
            Command::Write { lba, frames, fua } => (lba.0, frames.to_vec(), fua, 0),
            Command::Deallocate { lba, blocks } | Command::WriteZeroes { lba, blocks } => {
                (lba.0, Vec::new(), false, blocks)
            }
            Command::Flush => (0, Vec::new(), false, 0),
        };
        let held = Held {
            queue: self.index,
            tag,
            kind: command.kind(),
            lba,
            frames,
            fua,
            blocks,
        };
        let pass = {
            let mut st = self.ctl.state.lock().unwrap();
            st.held.push(held);
            st.pass_through
        };
        if pass {
            let last = self.ctl.held() - 1;
            self.ctl.release(last);
        }
        Ok(tag)
    }

    fn poll(&mut self, _now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        let ready: Vec<Completion> = {
            let mut st = self.ctl.state.lock().unwrap();
            let posted = &mut st.queues[self.index].1;
            let n = max.min(posted.len());
            posted.drain(..n).collect()
        };
        let n = ready.len();
        ready.into_iter().for_each(done);
        n
    }

    fn in_flight(&self) -> usize {
        let st = self.ctl.state.lock().unwrap();
        st.queues[self.index].1.len() + st.held.iter().filter(|h| h.queue == self.index).count()
    }
}

impl BlockDevice for HeldDevice {
    type Queue = HeldQueue;
    type Frames = HookedFrames;
    fn geometry(&self) -> Geometry {
        self.ram.geometry()
    }
    fn frames(&self) -> &HookedFrames {
        &self.frames
    }
    fn open_queue(&self) -> Result<HeldQueue, DevError> {
        let inner = self.ram.open_queue()?;
        let mut st = self.ctl.state.lock().unwrap();
        st.queues.push((inner, Vec::new()));
        Ok(HeldQueue {
            ctl: self.ctl.clone(),
            index: st.queues.len() - 1,
            next_tag: 0,
            depth: self.ram.geometry().queue_depth as usize,
        })
    }
}
